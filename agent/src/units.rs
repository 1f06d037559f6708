//! How numbers are written for people, the same in every face (report, advice, dashboard).

/// `b` in powers of 1024: the scaled value and the power (0 = bytes, 1 = Ki, 2 = Mi, …, at most
/// `max_power`).
pub fn binary_scale(b: u64, max_power: usize) -> (f64, usize) {
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < max_power {
        v /= 1024.0;
        u += 1;
    }
    (v, u)
}

/// "4 KiB", "3 MiB", "1.5 GiB".
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (v, u) = binary_scale(b, UNITS.len() - 1);
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A count with its noun, singular for one: "1 run", "5 runs".
pub fn count_of(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A share as a percentage with one decimal: "99.5%".
pub fn pct(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}

/// [`pct`], or `?` when the share is not known.
pub fn pct_or_unknown(r: Option<f64>) -> String {
    r.map_or_else(|| "?".into(), pct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_shares() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(binary_scale(3 << 30, 2), (3072.0, 2), "capped at MiB");
        assert_eq!(pct_or_unknown(Some(0.995)), "99.5%");
        assert_eq!(pct_or_unknown(None), "?");
        assert_eq!(count_of(1, "run", "runs"), "1 run");
        assert_eq!(count_of(0, "run", "runs"), "0 runs");
        assert_eq!(count_of(40, "hit", "hits"), "40 hits");
    }
}
