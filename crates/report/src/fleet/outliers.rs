//! Which hosts stand out in one column of the fleet table: Tukey's fences,
//! beyond 1.5 interquartile ranges below the first quartile or above the
//! third. Quartiles by linear interpolation between order statistics (R's
//! type 7). With fewer than [`MIN_HOSTS`] values the quartiles say nothing
//! and no host is marked.

/// Fewest values for which hosts are marked.
pub const MIN_HOSTS: usize = 4;

/// How far beyond the quartiles a value must lie, in interquartile ranges.
pub const IQR_FACTOR: f64 = 1.5;

/// The fences of one column: values outside [low, high] are outliers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fences {
    pub q1: f64,
    pub q3: f64,
    pub low: f64,
    pub high: f64,
}

/// Which side of the fences a value lies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Low,
    High,
}

impl Fences {
    /// The fences of `values` (finite ones), or `None` with fewer than
    /// [`MIN_HOSTS`] of them.
    pub fn of(values: &[f64]) -> Option<Fences> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.len() < MIN_HOSTS {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let (q1, q3) = (quantile(&sorted, 0.25), quantile(&sorted, 0.75));
        let iqr = q3 - q1;
        Some(Fences {
            q1,
            q3,
            low: q1 - IQR_FACTOR * iqr,
            high: q3 + IQR_FACTOR * iqr,
        })
    }

    /// The side of the fences `value` lies beyond, if any.
    pub fn side(&self, value: f64) -> Option<Side> {
        if value < self.low {
            Some(Side::Low)
        } else if value > self.high {
            Some(Side::High)
        } else {
            None
        }
    }
}

/// The `q` quantile of sorted, non-empty `values`, interpolating linearly.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate_between_order_statistics() {
        let f = Fences::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!((f.q1, f.q3), (2.0, 4.0));
        assert_eq!((f.low, f.high), (-1.0, 7.0));
        let f = Fences::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((f.q1, f.q3), (1.75, 3.25));
    }

    #[test]
    fn a_host_far_from_the_rest_is_marked_on_its_side() {
        let values = [100.0, 102.0, 98.0, 101.0, 99.0, 250.0];
        let f = Fences::of(&values).unwrap();
        let marked: Vec<Option<Side>> = values.iter().map(|v| f.side(*v)).collect();
        assert_eq!(marked, [None, None, None, None, None, Some(Side::High)]);
        let f = Fences::of(&[100.0, 102.0, 98.0, 101.0, 10.0]).unwrap();
        assert_eq!(f.side(10.0), Some(Side::Low));
    }

    #[test]
    fn too_few_hosts_mark_nothing_and_non_finite_values_do_not_count() {
        assert_eq!(Fences::of(&[1.0, 2.0, 1000.0]), None);
        assert_eq!(Fences::of(&[1.0, 2.0, 3.0, f64::NAN]), None);
    }
}
