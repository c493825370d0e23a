//! Which mount a path is on, from /proc/self/mountinfo, and where its
//! server is: what `fs.remote_read dir=/mnt/...` records beside its
//! numbers (file system type, source, options) and where it takes the
//! model's round trip from.
//!
//! The server comes from the source and the super-block options as each
//! network file system writes them: `host:/export` and `addr=` for NFS,
//! `//host/share` and `addr=` for CIFS/SMB, `[user@]host:path` for sshfs,
//! the source address with `trans=tcp` and `port=` for 9p. Parsing is pure
//! and tested on hand-written lines.

use crate::error::MountError;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The part of the file system mounted there (`/` for most).
    pub root: String,
    /// `nfs4`, `cifs`, `9p`, `fuse.sshfs`, `tmpfs`, `ext4`, ...
    pub fs_type: String,
    /// `server:/export`, `//server/share`, `/dev/vda1`, ...
    pub source: String,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub mount_options: String,
    /// The file system's own options (`rsize=...,addr=192.0.2.7`).
    pub super_options: String,
}

/// Where a network file system's server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// A host name or an address, as the mount names it.
    pub host: String,
    /// The file system's port (2049 NFS, 445 SMB, 22 sshfs, 564 9p), or the
    /// one its options set.
    pub port: u16,
}

impl Mount {
    /// The network server behind this mount; `None` for a local file system.
    pub fn server(&self) -> Option<Server> {
        let option = |name: &str| option_value(&self.super_options, name);
        let fs = self.fs_type.as_str();
        let (host, default_port) = if fs.starts_with("nfs") {
            let host = option("addr")
                .or_else(|| split_host_path(&self.source).map(|(h, _)| h.to_string()))?;
            (host, 2049)
        } else if fs == "cifs" || fs == "smb3" {
            let host = option("addr").or_else(|| {
                self.source
                    .strip_prefix("//")
                    .and_then(|rest| rest.split('/').next())
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
            })?;
            (host, 445)
        } else if fs == "9p" {
            if option("trans").as_deref() != Some("tcp") {
                return None; // virtio or fd transports: no network
            }
            (self.source.clone(), 564)
        } else if fs == "fuse.sshfs" {
            // `[user@]host:path`: the user first, then the host.
            let source = self
                .source
                .split_once('@')
                .map_or(self.source.as_str(), |(_, h)| h);
            let (host, _) = split_host_path(source)?;
            (host.to_string(), 22)
        } else {
            return None;
        };
        let port = option("port")
            .and_then(|p| p.parse().ok())
            .filter(|p| *p != 0)
            .unwrap_or(default_port);
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        (!host.is_empty()).then_some(Server { host, port })
    }

    /// `fuse.sshfs root@198.18.80.2:/srv on /mnt/x (rw,nosuid; user_id=0)`.
    pub fn describe(&self) -> String {
        format!(
            "{} {} on {} ({}; {})",
            self.fs_type,
            self.source,
            self.mount_point.display(),
            self.mount_options,
            self.super_options
        )
    }
}

/// `host:/path` (or `[v6]:/path`) into (host, path).
fn split_host_path(source: &str) -> Option<(&str, &str)> {
    if let Some(rest) = source.strip_prefix('[') {
        let (host, path) = rest.split_once("]:")?;
        return Some((host, path));
    }
    let (host, path) = source.split_once(':')?;
    (!host.is_empty()).then_some((host, path))
}

/// The value of `name=` in a comma-separated option list.
fn option_value(options: &str, name: &str) -> Option<String> {
    options
        .split(',')
        .find_map(|o| o.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_string)
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4);
        if bytes[i] == b'\\' {
            if let Some(d) = digits.filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b))) {
                let v = (d[0] - b'0') as u32 * 64 + (d[1] - b'0') as u32 * 8 + (d[2] - b'0') as u32;
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One mountinfo line: `ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - TYPE SOURCE SUPER`.
pub fn parse_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let right: Vec<&str> = right.split(' ').collect();
    if left.len() < 6 || right.len() < 2 {
        return None;
    }
    Some(Mount {
        root: unescape(left[3]),
        mount_point: PathBuf::from(unescape(left[4])),
        mount_options: left[5].to_string(),
        fs_type: right[0].to_string(),
        source: unescape(right[1]),
        super_options: right.get(2).map(|s| s.to_string()).unwrap_or_default(),
    })
}

/// The mount `path` (absolute, symlinks resolved) is on: the longest
/// mount point above it, the last mounted where two are stacked.
pub fn mount_of_in(mountinfo: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for mount in mountinfo.lines().filter_map(parse_line) {
        if !path.starts_with(&mount.mount_point) {
            continue;
        }
        let deeper = best.as_ref().is_none_or(|b| {
            mount.mount_point.components().count() >= b.mount_point.components().count()
        });
        if deeper {
            best = Some(mount);
        }
    }
    best
}

/// The mount `dir` is on, read from /proc/self/mountinfo.
pub fn mount_of(dir: &Path) -> Result<Mount, MountError> {
    let path = dir.canonicalize().map_err(|source| MountError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountError::MountInfo)?;
    mount_of_in(&text, &path).ok_or(MountError::NoMount(path))
}

/// The server's address: `host` itself if it is one, else its first
/// resolved address.
pub fn resolve(server: &Server) -> Result<std::net::SocketAddr, MountError> {
    if let Ok(ip) = server.host.parse::<IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, server.port));
    }
    use std::net::ToSocketAddrs;
    (server.host.as_str(), server.port)
        .to_socket_addrs()
        .map_err(|source| MountError::Resolve {
            host: server.host.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| MountError::NoAddress(server.host.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 0:26 / /tmp rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=100m
41 22 0:40 / /mnt/nfs rw,relatime shared:20 - nfs4 server.example:/export rw,vers=4.2,rsize=1048576,proto=tcp,port=0,timeo=600,addr=192.0.2.7,clientaddr=192.0.2.1
42 22 0:41 / /mnt/smb rw,relatime - cifs //files.example/share rw,vers=3.1.1,addr=192.0.2.8,port=10445
43 22 0:42 / /mnt/ssh rw,nosuid,nodev,relatime - fuse.sshfs root@[2001:db8::1]:/srv rw,user_id=0,group_id=0
44 22 0:43 / /mnt/9p rw - 9p 192.0.2.9 rw,trans=tcp,port=5640
45 22 0:44 / /mnt/virt rw - 9p hostshare rw,trans=virtio
46 22 0:45 /sub /mnt/with\\040space rw - fuse.sshfs me@host.example:/home/me rw
47 30 0:46 / /tmp/over rw - tmpfs tmpfs rw
48 30 0:47 / /tmp/over rw - fuse.sshfs h:/x rw
";

    fn mount(path: &str) -> Mount {
        mount_of_in(INFO, Path::new(path)).unwrap()
    }

    #[test]
    fn the_deepest_and_latest_mount_holds_a_path() {
        assert_eq!(mount("/home/me").fs_type, "ext4");
        assert_eq!(mount("/tmp/a").fs_type, "tmpfs");
        assert_eq!(mount("/tmp/over/x").fs_type, "fuse.sshfs");
        assert_eq!(mount("/mnt/nfs/d/f").mount_point, Path::new("/mnt/nfs"));
        // /mnt/nfsx is not under /mnt/nfs.
        assert_eq!(mount("/mnt/nfsx").fs_type, "ext4");
        let spaced = mount("/mnt/with space/f");
        assert_eq!(spaced.root, "/sub");
        assert_eq!(spaced.mount_point, Path::new("/mnt/with space"));
    }

    #[test]
    fn each_network_file_system_names_its_server() {
        let server = |p: &str| mount(p).server();
        let s = |host: &str, port: u16| {
            Some(Server {
                host: host.into(),
                port,
            })
        };
        // NFS: addr= wins over the name; port=0 means the default.
        assert_eq!(server("/mnt/nfs"), s("192.0.2.7", 2049));
        assert_eq!(server("/mnt/smb"), s("192.0.2.8", 10445));
        assert_eq!(server("/mnt/ssh"), s("2001:db8::1", 22));
        assert_eq!(server("/mnt/9p"), s("192.0.2.9", 5640));
        assert_eq!(server("/mnt/virt"), None);
        assert_eq!(server("/mnt/with space"), s("host.example", 22));
        assert_eq!(server("/tmp"), None);
        assert_eq!(server("/"), None);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        for line in ["", "1 2 3", "a b c d e f", " - ", "1 2 3 4 5 6 - t"] {
            let _ = parse_line(line);
        }
        assert!(parse_line("1 2 3 / /x rw - tmpfs none").is_some());
        assert!(parse_line("1 2 3 / /x rw - tmpfs").is_none(), "no source");
        assert_eq!(unescape("a\\040b\\"), "a b\\");
        assert_eq!(unescape("\\04"), "\\04");
    }

    #[test]
    fn this_process_root_is_on_some_mount() {
        let m = mount_of(Path::new("/")).unwrap();
        assert_eq!(m.mount_point, Path::new("/"));
    }
}
