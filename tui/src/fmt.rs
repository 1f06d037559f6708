//! Compact number formats for table cells. Unknown is always `?`, never 0.
use std::fmt::Write;

/// Appends a rate or count with a k/M/G suffix to fit a narrow column: `950`, `12.3k`, `4.0M`.
pub fn push_si(out: &mut String, v: Option<f64>) {
    let Some(v) = v else {
        out.push('?');
        return;
    };
    let (n, unit) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let _ = if unit.is_empty() {
        if v > 0.0 && v < 10.0 && v.fract() != 0.0 {
            write!(out, "{n:.1}")
        } else {
            write!(out, "{n:.0}")
        }
    } else if n >= 100.0 {
        write!(out, "{n:.0}{unit}")
    } else {
        write!(out, "{n:.1}{unit}")
    };
}

pub fn si(v: Option<f64>) -> String {
    let mut s = String::new();
    push_si(&mut s, v);
    s
}

/// A share as a percentage with one decimal (`99.5%`), `?` when unknown.
pub fn pct(r: Option<f64>) -> String {
    ppscope::units::pct_or_unknown(r)
}

/// A duration in a narrow column: `512ns`, `2.0µs`, `1.5ms`, `1.20s`.
pub fn dur(ns: Option<u64>) -> String {
    match ns {
        None => "?".into(),
        Some(n) if n < 1_000 => format!("{n}ns"),
        Some(n) if n < 1_000_000 => format!("{:.1}µs", n as f64 / 1e3),
        Some(n) if n < 1_000_000_000 => format!("{:.1}ms", n as f64 / 1e6),
        Some(n) => format!("{:.2}s", n as f64 / 1e9),
    }
}

/// Bytes in a narrow column: `47M`, `512K`, `1.5G` (binary units).
pub fn bytes(b: Option<u64>) -> String {
    let Some(b) = b else { return "?".into() };
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let (v, u) = ppscope::units::binary_scale(b, UNITS.len() - 1);
    if u == 0 || v >= 10.0 {
        format!("{v:.0}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

/// An interval as a person sets it: `500ms`, `1s`, `2.5s`.
pub fn interval(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(si(None), "?");
        assert_eq!(si(Some(0.0)), "0");
        assert_eq!(si(Some(2.5)), "2.5");
        assert_eq!(si(Some(950.0)), "950");
        assert_eq!(si(Some(12_345.0)), "12.3k");
        assert_eq!(si(Some(400_000.0)), "400k");
        assert_eq!(si(Some(4_000_000.0)), "4.0M");
        assert_eq!(pct(Some(0.995)), "99.5%");
        assert_eq!(pct(None), "?");
        assert_eq!(dur(Some(512)), "512ns");
        assert_eq!(dur(Some(2048)), "2.0µs");
        assert_eq!(dur(None), "?");
        assert_eq!(bytes(Some(47 << 20)), "47M");
        assert_eq!(bytes(Some(1536)), "1.5K");
        assert_eq!(bytes(None), "?");
        assert_eq!(interval(std::time::Duration::from_millis(500)), "500ms");
        assert_eq!(interval(std::time::Duration::from_secs(2)), "2s");
    }
}
