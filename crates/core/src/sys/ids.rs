//! The effective user id: who the kernel checks permissions against.

/// The effective user id of this process.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process runs with an effective uid of 0 (root). Capabilities
/// granted otherwise are not considered: what needs root here asks for it.
pub fn is_root() -> bool {
    geteuid() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_uid_is_the_one_proc_reports() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let effective: u32 = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(geteuid(), effective);
        assert_eq!(is_root(), effective == 0);
    }
}
