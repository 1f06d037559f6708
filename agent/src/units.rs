//! How numbers are written for people, the same in every face (report, advice, dashboard).

/// "4.0 KiB", "3.0 MiB", "1.5 GiB".
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A share as a percentage with one decimal: "99.5%".
pub fn pct(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}
