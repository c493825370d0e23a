//! DAMON: the kdamonds and schemes configured under
//! /sys/kernel/mm/damon/admin, described for the notes.

use super::parse::parse_bool_flag;
use super::summary::format_binary_size;
use super::sysfs::{numbered_dirs, read_u64, read_value};
use super::DamonInfo;
use std::path::Path;
use std::time::Duration;

/// Reads DAMON's sysfs admin tree (`admin` is .../damon/admin) and the
/// DAMON_RECLAIM module's `enabled` parameter.
pub(super) fn read_damon(admin: &Path, reclaim_module_enabled: Option<&str>) -> DamonInfo {
    let mut info = DamonInfo::default();
    for (kd, kd_dir) in numbered_dirs(&admin.join("kdamonds")) {
        // A stopped kdamond's schemes do nothing to the run.
        if read_value(kd_dir.join("state")).as_deref() != Some("on") {
            continue;
        }
        info.kdamonds += 1;
        for (ctx, ctx_dir) in numbered_dirs(&kd_dir.join("contexts")) {
            let ops = read_value(ctx_dir.join("operations"));
            let intervals = ctx_dir.join("monitoring_attrs/intervals");
            let sample_us = read_u64(intervals.join("sample_us"));
            let aggr_us = read_u64(intervals.join("aggr_us"));
            for (k, scheme_dir) in numbered_dirs(&ctx_dir.join("schemes")) {
                let scheme = read_scheme(&scheme_dir);
                if scheme.is_reclaim() {
                    info.proactive_reclaim = true;
                }
                let ops = ops
                    .as_deref()
                    .map(|o| format!(" ({o})"))
                    .unwrap_or_default();
                info.schemes.push(format!(
                    "kdamond {kd} ctx {ctx}{ops} scheme {k}: {}",
                    scheme.describe(sample_us, aggr_us)
                ));
            }
        }
    }
    if reclaim_module_enabled.map(str::trim) == Some("Y") {
        info.proactive_reclaim = true;
        info.schemes
            .push("damon_reclaim module enabled".to_string());
    }
    info
}

/// What one DAMOS scheme does, as far as its sysfs files tell.
#[derive(Debug, Default)]
struct Scheme {
    action: Option<String>,
    size: Option<(u64, u64)>,
    nr_accesses: Option<(u64, u64)>,
    age: Option<(u64, u64)>,
    filters: Vec<SchemeFilter>,
    quota_bytes: u64,
    quota_ms: u64,
    quota_reset_ms: u64,
    watermark_metric: Option<String>,
}

#[derive(Debug)]
struct SchemeFilter {
    kind: String,
    matching: bool,
    /// Older kernels have no `allow` file: their filters only exclude.
    allow: bool,
    memcg_path: Option<String>,
}

fn read_scheme(dir: &Path) -> Scheme {
    let range = |name: &str| {
        let d = dir.join("access_pattern").join(name);
        Some((read_u64(d.join("min"))?, read_u64(d.join("max"))?))
    };
    let mut filters = Vec::new();
    // `filters` is the original interface; newer kernels split it into
    // core_filters and ops_filters. All three can be populated.
    for group in ["filters", "core_filters", "ops_filters"] {
        for (_, f) in numbered_dirs(&dir.join(group)) {
            let Some(kind) = read_value(f.join("type")) else {
                continue;
            };
            filters.push(SchemeFilter {
                kind,
                matching: read_value(f.join("matching")).and_then(|v| parse_bool_flag(&v))
                    != Some(false),
                allow: read_value(f.join("allow")).and_then(|v| parse_bool_flag(&v)) == Some(true),
                memcg_path: read_value(f.join("memcg_path")),
            });
        }
    }
    let quotas = dir.join("quotas");
    Scheme {
        action: read_value(dir.join("action")),
        size: range("sz"),
        nr_accesses: range("nr_accesses"),
        age: range("age"),
        filters,
        quota_bytes: read_u64(quotas.join("bytes")).unwrap_or(0),
        quota_ms: read_u64(quotas.join("ms")).unwrap_or(0),
        quota_reset_ms: read_u64(quotas.join("reset_interval_ms")).unwrap_or(0),
        watermark_metric: read_value(dir.join("watermarks/metric")).filter(|m| m != "none"),
    }
}

impl Scheme {
    fn is_reclaim(&self) -> bool {
        matches!(self.action.as_deref(), Some("pageout") | Some("lru_deprio"))
    }

    /// One readable line; ages are converted to time because "12
    /// aggregation intervals" means nothing without the interval.
    fn describe(&self, sample_us: Option<u64>, aggr_us: Option<u64>) -> String {
        let mut parts = vec![format!("action={}", self.action.as_deref().unwrap_or("?"))];
        if let Some((min, max)) = self.size {
            let fmt = |b: u64| format_binary_size(b);
            parts.push(format!("size {}", format_range(min, max, fmt)));
        }
        if let Some((min, max)) = self.nr_accesses {
            let mut s = format!("accesses {}", format_range(min, max, |n| n.to_string()));
            if let Some(samples) = aggr_us.zip(sample_us).and_then(|(a, s)| a.checked_div(s)) {
                s.push_str(&format!(" of {samples} samples"));
            }
            parts.push(s);
        }
        if let Some((min, max)) = self.age {
            let mut s = format!("age {} aggr", format_range(min, max, |n| n.to_string()));
            if let Some(aggr) = aggr_us.filter(|&a| a > 0) {
                let time = |n: u64| {
                    humantime::format_duration(Duration::from_micros(n.saturating_mul(aggr)))
                        .to_string()
                };
                s.push_str(&format!(" ({})", format_range(min, max, time)));
            }
            parts.push(s);
        }
        if !self.filters.is_empty() {
            let filters: Vec<String> = self
                .filters
                .iter()
                .map(|f| {
                    let neg = if f.matching { "" } else { "!" };
                    let path = f
                        .memcg_path
                        .as_deref()
                        .filter(|_| f.kind == "memcg")
                        .map(|p| format!("({p})"))
                        .unwrap_or_default();
                    let verdict = if f.allow { "allow" } else { "reject" };
                    format!("{neg}{}{path}:{verdict}", f.kind)
                })
                .collect();
            parts.push(format!("filters [{}]", filters.join(", ")));
        }
        if self.quota_bytes > 0 || self.quota_ms > 0 {
            let mut limits = Vec::new();
            if self.quota_bytes > 0 {
                limits.push(format_binary_size(self.quota_bytes));
            }
            if self.quota_ms > 0 {
                limits.push(format!("{} ms", self.quota_ms));
            }
            let per = humantime::format_duration(Duration::from_millis(self.quota_reset_ms));
            parts.push(format!("quota {} per {per}", limits.join(" or ")));
        }
        if let Some(metric) = &self.watermark_metric {
            parts.push(format!("only within {metric} watermarks"));
        }
        parts.join(" ")
    }
}

/// The kernel writes "no upper bound" as the type's maximum (u32 for counts
/// and ages, unsigned long for sizes).
fn is_unbounded(n: u64) -> bool {
    n == u64::MAX || n == u64::from(u32::MAX)
}

pub(super) fn format_range(min: u64, max: u64, fmt: impl Fn(u64) -> String) -> String {
    match (min, is_unbounded(max)) {
        (0, true) => "any".to_string(),
        (_, true) => format!(">={}", fmt(min)),
        _ if min == max => format!("={}", fmt(min)),
        (0, false) => format!("<={}", fmt(max)),
        _ => format!("{}..{}", fmt(min), fmt(max)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::test_tree::Scratch;

    #[test]
    fn ranges_and_sizes() {
        let n = |v: u64| v.to_string();
        assert_eq!(format_range(0, u64::MAX, n), "any");
        assert_eq!(format_range(12, u64::from(u32::MAX), n), ">=12");
        assert_eq!(format_range(0, 1, n), "<=1");
        assert_eq!(format_range(2, 5, n), "2..5");
        assert_eq!(format_range(0, 0, n), "=0");
        assert_eq!(format_binary_size(32 * 1024), "32 KiB");
        assert_eq!(format_binary_size(32 << 20), "32 MiB");
        assert_eq!(format_binary_size(1536 * 1024), "1536 KiB");
        assert_eq!(format_binary_size(100), "100 B");
    }

    #[test]
    fn damon_tree() {
        let s = Scratch::new("damon");
        let kd = "kdamonds/0";
        s.write(&format!("{kd}/state"), "on\n");
        let ctx = format!("{kd}/contexts/0");
        s.write(&format!("{ctx}/operations"), "paddr\n");
        s.write(
            &format!("{ctx}/monitoring_attrs/intervals/sample_us"),
            "500000\n",
        );
        s.write(
            &format!("{ctx}/monitoring_attrs/intervals/aggr_us"),
            "5000000\n",
        );
        let sch = format!("{ctx}/schemes/0");
        s.write(&format!("{sch}/action"), "pageout\n");
        s.write(&format!("{sch}/access_pattern/sz/min"), "0\n");
        s.write(
            &format!("{sch}/access_pattern/sz/max"),
            "18446744073709551615\n",
        );
        s.write(&format!("{sch}/access_pattern/nr_accesses/min"), "0\n");
        s.write(&format!("{sch}/access_pattern/nr_accesses/max"), "1\n");
        s.write(&format!("{sch}/access_pattern/age/min"), "12\n");
        s.write(&format!("{sch}/access_pattern/age/max"), "4294967295\n");
        s.write(&format!("{sch}/ops_filters/0/type"), "anon\n");
        s.write(&format!("{sch}/ops_filters/0/matching"), "Y\n");
        s.write(&format!("{sch}/ops_filters/0/allow"), "N\n");
        s.write(&format!("{sch}/ops_filters/1/type"), "unmapped\n");
        s.write(&format!("{sch}/ops_filters/1/matching"), "Y\n");
        s.write(&format!("{sch}/ops_filters/1/allow"), "Y\n");
        s.write(&format!("{sch}/quotas/bytes"), "134217728\n");
        s.write(&format!("{sch}/quotas/ms"), "50\n");
        s.write(&format!("{sch}/quotas/reset_interval_ms"), "1000\n");
        s.write(&format!("{sch}/watermarks/metric"), "none\n");
        // A second scheme with nothing but an action: must still be listed.
        s.write(&format!("{ctx}/schemes/1/action"), "stat\n");
        // A stopped kdamond does not count.
        s.write("kdamonds/1/state", "off\n");
        s.write("kdamonds/1/contexts/0/schemes/0/action", "pageout\n");

        let d = read_damon(&s.0, None);
        assert_eq!(d.kdamonds, 1);
        assert!(d.proactive_reclaim);
        assert_eq!(
            d.schemes,
            vec![
                "kdamond 0 ctx 0 (paddr) scheme 0: action=pageout size any \
                 accesses <=1 of 10 samples age >=12 aggr (>=1m) \
                 filters [anon:reject, unmapped:allow] quota 128 MiB or 50 ms per 1s"
                    .to_string(),
                "kdamond 0 ctx 0 (paddr) scheme 1: action=stat".to_string(),
            ]
        );

        let with_module = read_damon(&s.0.join("missing"), Some("Y\n"));
        assert_eq!(with_module.kdamonds, 0);
        assert!(with_module.proactive_reclaim);
        assert_eq!(
            with_module.schemes,
            vec!["damon_reclaim module enabled".to_string()]
        );

        assert_eq!(
            read_damon(&s.0.join("missing"), Some("N")),
            DamonInfo::default()
        );
    }
}
