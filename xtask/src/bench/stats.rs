//! Median and spread of repeated measurements (the machine is shared and the VM emulated:
//! one figure alone means little).

/// The arithmetic mean (0 for no values): what a target on a share of a core is held to, the
/// seconds of a scrape counted in full.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Median with the lowest and highest value seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// None for an empty or all-NaN sample.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// Half the range as a share of the median (the "±" a reader should allow).
    pub fn rel_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / 2.0 / self.median.abs()
        }
    }

    /// `12.3 (11.9–12.8, n=3)`.
    pub fn show(&self, decimals: usize) -> String {
        if self.n == 1 {
            return format!("{:.*} (n=1)", decimals, self.median);
        }
        format!(
            "{:.*} ({:.*}–{:.*}, n={})",
            decimals, self.median, decimals, self.min, decimals, self.max, self.n
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_counts_every_value_and_is_0_for_none() {
        assert_eq!(mean(&[0.0, 1.0, 1.0, 10.0]), 3.0);
        assert_eq!(mean(&[]), 0.0);
    }

    #[test]
    fn median_and_range() {
        let s = Spread::of(&[3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[1.0, 2.0, 3.0, 4.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[f64::NAN]).is_none());
        assert!((Spread::of(&[90.0, 110.0]).unwrap().rel_spread() - 0.1).abs() < 1e-9);
        assert_eq!(Spread::of(&[1.5]).unwrap().show(1), "1.5 (n=1)");
    }
}
