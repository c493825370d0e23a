//! The published studies whose figures `osprobe reproduce` sets beside this
//! machine's: each named by its title and source as the study itself gives
//! them, with the anchor of its description in docs/references.md. The
//! reference data (`data/reference.json`) keys its rows by the study's id.

/// One study.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Study {
    /// The key of the study's rows in the reference data: `000` .. `004`.
    pub id: &'static str,
    pub title: &'static str,
    /// Authors, venue and year, as far as the study states them.
    pub source: &'static str,
    /// The anchor of its description in docs/references.md.
    pub slug: &'static str,
}

/// Every study, in the order of their ids.
pub const STUDIES: [Study; 5] = [
    Study {
        id: "000",
        title: "Simple Operating System Documentation",
        source: "Tong Wu and Lewis Lee, design document of SOS, a teaching operating system on seL4, October 2014",
        slug: "simple-operating-system-documentation",
    },
    Study {
        id: "001",
        title: "Playing BBR with a userspace network stack",
        source: "Hajime Tazaki (IIJ), talk at Linux netdev 2.1, Montreal, April 2017",
        slug: "playing-bbr-with-a-userspace-network-stack",
    },
    Study {
        id: "002",
        title: "Data rates of a file transfer",
        source: "a student lab report (XINU lab): data rates against file size, packet size and connections, beside iperf; author and year not stated",
        slug: "data-rates-of-a-file-transfer",
    },
    Study {
        id: "003",
        title: "[Linux] Network transfer rates",
        source: "a blog post of January 20, 2006: a one-segment uIP sender stalled by delayed ACKs, fixed with TCP_QUICKACK",
        slug: "linux-network-transfer-rates",
    },
    Study {
        id: "004",
        title: "CSE 221 Project",
        source: "Yixin Zou, Tao Li and Zhoulin Chen, UCSD CSE 221 course project report, about 2019",
        slug: "cse-221-project",
    },
];

/// The study with this id.
pub fn study(id: &str) -> Option<&'static Study> {
    STUDIES.iter().find(|s| s.id == id)
}

/// `"CSE 221 Project" (Yixin Zou, ...)`, or the id when it is unknown.
pub fn study_name(id: &str) -> String {
    match study(id) {
        Some(s) => format!("\u{201c}{}\u{201d}", s.title),
        None => format!("#{id}"),
    }
}

/// A slug of a title: lowercase words joined by `-`.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_study_has_its_title_slug_and_a_row_of_data() {
        let refs = crate::reproduce::references().unwrap();
        for s in STUDIES {
            assert_eq!(s.slug, slug(s.title), "{}", s.id);
            assert!(refs.iter().any(|r| r.seed == s.id), "no figure of {}", s.id);
        }
        assert_eq!(study_name("004"), "\u{201c}CSE 221 Project\u{201d}");
        assert_eq!(study_name("9"), "#9");
    }
}
