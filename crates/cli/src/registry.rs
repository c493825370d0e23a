//! Every experiment this build has: each experiment crate's `register`.

use osprobe_core::Registry;

/// Every experiment this build has.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    osprobe_machine::register(&mut registry);
    osprobe_net::register(&mut registry);
    osprobe_rfs::register(&mut registry);
    osprobe_pager::register(&mut registry);
    osprobe_userspace::register(&mut registry);
    registry
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report's tests build these views by hand (it sees no
    /// experiment); here the experiments must declare what they assume.
    #[test]
    fn the_experiments_with_a_special_plot_declare_it() {
        let views = registry().plot_views();
        let latency = views.of("mem.latency");
        assert!(latency.cache_markers && latency.log_x);
        assert_eq!(latency.series, Some("stride"));
        let cc = views.of("net.cc");
        assert!(cc.bars_for_series);
        assert_eq!(cc.series, Some("cc"));
        let userspace = views.of("net.userspace");
        assert_eq!(userspace.series, Some("clock"));
        let expected = userspace
            .expected
            .expect("net.userspace expects a round trip");
        assert_eq!((expected.param, expected.factor), ("delay", 2.0));
        assert!(views
            .of("time.sleep")
            .param_units
            .iter()
            .any(|(name, _, factor)| *name == "requested" && *factor == 1e3));
        assert_eq!(views.of("cpu.syscall"), Default::default());
    }
}
