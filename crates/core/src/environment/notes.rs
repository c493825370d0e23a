//! The notes: the conditions a reader should know before trusting or
//! comparing a run's numbers (SMT, governor, clock source, THP, DAMON ...).

use super::Environment;

pub(super) fn notes_for(env: &Environment) -> Vec<String> {
    let mut notes = Vec::new();
    if env.damon.proactive_reclaim {
        // Name the mechanism so the user can find and switch it off.
        let what = if env
            .damon
            .schemes
            .iter()
            .any(|s| s.contains("action=pageout"))
        {
            "DAMON pageout"
        } else if env
            .damon
            .schemes
            .iter()
            .any(|s| s.contains("action=lru_deprio"))
        {
            "DAMON lru_deprio"
        } else {
            "DAMON_RECLAIM"
        };
        notes.push(format!(
            "proactive reclaim ({what}) is active: pages idle for a while are evicted, \
             page-cache and page-fault results will vary"
        ));
    }
    if let Some(h) = &env.virtualization.detected {
        notes.push(format!(
            "running under a hypervisor ({h}): the host may preempt this VM; look at p99 and max"
        ));
    }
    if let Some(g) = &env.governor {
        if g != "performance" {
            notes.push(format!(
                "CPU frequency governor is '{g}': the clock speed follows load, \
                 so short runs may be measured at a lower frequency"
            ));
        }
    }
    if env.smt == Some(true) {
        notes.push("SMT is active: sibling threads share a core's caches and ports".to_string());
    }
    if env.thp_enabled.as_deref() == Some("always") {
        notes.push(
            "transparent huge pages are 'always': anonymous memory may be backed by huge pages, \
             which changes TLB-miss and page-fault costs"
                .to_string(),
        );
    }
    if !env.clocksource.is_empty()
        && env.clocksource != "unknown"
        && !VDSO_CLOCKSOURCES.contains(&env.clocksource.as_str())
    {
        notes.push(format!(
            "kernel clocksource is '{}': clock_gettime cannot stay in the vDSO, \
             so each timestamp costs a system call",
            env.clocksource
        ));
    }
    notes
}

/// Clocksources that `clock_gettime` can read without entering the kernel;
/// anything else (hpet, acpi_pm, jiffies) makes every timestamp a syscall.
const VDSO_CLOCKSOURCES: &[&str] = &[
    "tsc",
    "kvm-clock",
    "hyperv_clocksource_tsc_page",
    "arch_sys_counter",
    "riscv_clocksource",
    "timebase",
    "xen",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_for_conditions() {
        let mut env = Environment {
            governor: Some("powersave".into()),
            smt: Some(true),
            clocksource: "hpet".into(),
            ..Environment::default()
        };
        env.virtualization.detected = Some("kvm".into());
        env.damon.proactive_reclaim = true;
        env.damon.schemes = vec!["kdamond 0 ctx 0 scheme 0: action=pageout".into()];
        let notes = notes_for(&env);
        assert!(notes[0].starts_with("proactive reclaim (DAMON pageout) is active"));
        assert!(notes.iter().any(|n| n.contains("hypervisor (kvm)")));
        assert!(notes.iter().any(|n| n.contains("'powersave'")));
        assert!(notes.iter().any(|n| n.starts_with("SMT is active")));
        assert!(notes.iter().any(|n| n.contains("'hpet'")));

        let quiet = Environment {
            governor: Some("performance".into()),
            clocksource: "tsc".into(),
            ..Environment::default()
        };
        assert!(notes_for(&quiet).is_empty());
    }
}
