//! Command-line values that come from users: durations, shares, listen addresses, agent URLs,
//! frame sizes.
//!
//! Kept in the library (not the binary) so the fuzz targets in `fuzz/` reach exactly the
//! code the CLI runs. Every input gets a value or one sentence, never a panic.
use std::{net::SocketAddr, time::Duration};

/// The longest duration any flag takes: a window, an interval or a grace period longer than
/// this is a typo, not a plan.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// `5`, `5s`, `500ms`, `2m`, `1.5`: a positive duration of at most a year.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_any_duration(s)?;
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year"));
    }
    Ok(d)
}

fn parse_any_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        // `Duration::from_secs_f64` panics past u64::MAX seconds ("1e300"): ask the
        // fallible one, so a typo is a sentence and not an abort.
        return match Duration::try_from_secs_f64(secs) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(format!("'{s}' is not a positive duration")),
            Err(_) if secs.is_finite() && secs > 0.0 => {
                Err(format!("'{s}' is too long a duration"))
            }
            Err(_) => Err(format!("'{s}' is not a positive duration")),
        };
    }
    let d = humantime::parse_duration(s).map_err(|e| format!("'{s}': {e} (try 5s, 500ms, 2m)"))?;
    if d.is_zero() {
        return Err(format!("'{s}' is not a positive duration"));
    }
    Ok(d)
}

/// `IP:PORT`, `[IPv6]:PORT` or `localhost:PORT` for the agent's listener. No other host
/// names: the agent must not depend on a resolver to start; `localhost` is taken as 127.0.0.1
/// without asking one.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let literal = match t.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => t.to_string(),
    };
    literal.parse::<SocketAddr>().map_err(|_| {
        format!(
            "'{s}' is not a listen address (IP:PORT or localhost:PORT, e.g. 127.0.0.1:9464 or [::1]:9464)"
        )
    })
}

/// The share a ring must reach (`simulate --target`): strictly between 0 and 1.
pub fn parse_target(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t < 1.0 => Ok(t),
        // All of them (1 as a share, 100 as a percentage): no ring keeps every page.
        Ok(t) if t == 1.0 || t == 100.0 => Err(format!(
            "'{s}' asks that every page be recycled, which no ring size can promise: give a \
             share below 1 (e.g. 0.99 or 0.999)"
        )),
        Ok(t) if t > 1.0 && t < 100.0 => Err(format!(
            "'{s}' is not a share between 0 and 1 (for {t}% write {})",
            t / 100.0
        )),
        _ => Err(format!(
            "'{s}' is not a share between 0 and 1 (e.g. 0.99 for 99%)"
        )),
    }
}

/// A remote agent: `http://HOST:PORT` (or the snapshot endpoint itself), checked whole by
/// the URL parser the HTTP client uses, so a bad port or host is refused here, not at the
/// first request.
pub fn parse_agent_url(s: &str) -> Result<String, String> {
    let t = s.trim();
    let example = "e.g. http://127.0.0.1:9464";
    match t.strip_prefix("http://") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => match url::Url::parse(t) {
            // The snapshot's path and query are added after it (`ConnectSource`).
            Ok(u) if u.query().is_some() || u.fragment().is_some() => Err(format!(
                "'{s}': an agent's address takes no query or fragment ({example})"
            )),
            Ok(u) if u.host().is_some() => Ok(t.to_string()),
            Ok(_) => Err(format!("'{s}' names no host ({example})")),
            Err(e) => Err(format!("'{s}': {e} ({example})")),
        },
        _ => Err(format!(
            "'{s}' is not an http:// URL of a ppscope agent ({example})"
        )),
    }
}

/// `120x40`: columns by rows.
pub fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not COLSxROWS (e.g. 120x40)");
    let (c, r) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (c, r): (u16, u16) = (c.parse().map_err(|_| bad())?, r.parse().map_err(|_| bad())?);
    if c == 0 || r == 0 {
        return Err(bad());
    }
    Ok((c, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_shares() {
        assert_eq!(parse_target("0.99"), Ok(0.99));
        for bad in ["99", "1", "1.5", "0", "-1", "NaN", "inf", "x", "", "100"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
        let e = parse_target("99").unwrap_err();
        assert!(e.contains("write 0.99"), "{e}");
        // All pages, as a share or a percentage: no hint to write 1 (itself refused).
        for all in ["1", "1.0", "100"] {
            let e = parse_target(all).unwrap_err();
            assert!(e.contains("every page") && e.contains("below 1"), "{e}");
        }
    }

    #[test]
    fn agent_urls_need_the_scheme() {
        assert!(parse_agent_url("http://127.0.0.1:9464").is_ok());
        assert!(parse_agent_url("http://agent.example:9464/api/v1/snapshot").is_ok());
        for bad in ["127.0.0.1:9464", "https://x:1", "http://", "ftp://x", ""] {
            assert!(parse_agent_url(bad).is_err(), "{bad}");
        }
        // Whole, as the client would parse it: a port out of range, a broken host.
        let e = parse_agent_url("http://127.0.0.1:99999").unwrap_err();
        assert!(e.contains("invalid port number"), "{e}");
        assert!(parse_agent_url("http://[::1:9464").is_err());
        for query in ["http://h:9464?x", "http://h:9464/#top"] {
            let e = parse_agent_url(query).unwrap_err();
            assert!(e.contains("no query or fragment"), "{e}");
        }
        assert!(parse_agent_url("http://[::1]:9464").is_ok());
        assert!(parse_agent_url("http://localhost:9464/").is_ok());
    }

    #[test]
    fn durations_longer_than_a_year_are_typos() {
        let e = parse_duration("10000000000000s").unwrap_err();
        assert!(e.contains("longer than a year"), "{e}");
        assert!(parse_duration("367d").is_err());
        assert!(parse_duration("30d").is_ok());
    }

    #[test]
    fn frame_sizes() {
        assert_eq!(parse_size("120x40"), Ok((120, 40)));
        assert_eq!(parse_size("80X24"), Ok((80, 24)));
        for bad in [
            "0x40", "120x0", "120", "x", "120x40x2", "-1x5", "70000x10", "",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["0", "-1", "0s", "NaN", "inf", "-inf", "1e-12", "soon", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Found by fuzzing: the float path used to panic here.
        let e = parse_duration("1e300").unwrap_err();
        assert!(e.contains("too long"), "{e}");
        assert!(parse_duration("99999999999999999999999h").is_err());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:9464"),
            Ok("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(
            parse_listen("[::1]:9464"),
            Ok("[::1]:9464".parse().unwrap())
        );
        assert_eq!(
            parse_listen("localhost:9464"),
            Ok("127.0.0.1:9464".parse().unwrap()),
            "localhost is loopback, no resolver asked"
        );
        for bad in [
            "localhost:9464x",
            "example.org:9464",
            "127.0.0.1",
            ":9464",
            "127.0.0.1:99999",
            "",
        ] {
            let e = parse_listen(bad).unwrap_err();
            assert!(e.contains("not a listen address"), "{bad}: {e}");
        }
    }
}
