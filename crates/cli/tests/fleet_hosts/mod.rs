//! Hosts for fleet tests: network namespaces `osprobe-fleet-*` on a bridge
//! in 198.18.40.0/24, each running a real OpenSSH server (`sshd -D`) with
//! its own host key, an authorized key and a client ssh config made in a
//! temp dir. Dropping the `Fleet` kills every process in the namespaces
//! and deletes them, the bridge and the temp dir.
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Each fleet takes a /28 of 198.18.40.0/24 (and the interface names
/// that go with it), held by an flock on a file per slot so that test
/// processes running at once (two trees, two test binaries) never share
/// one; the lock dies with its process. Slot 15 is bench/fleet.sh's.
const SLOTS: u32 = 15;
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

/// Where lock files live: /run/lock (a tmpfs), else the temp dir.
fn lock_dir() -> PathBuf {
    let run_lock = PathBuf::from("/run/lock");
    if run_lock.is_dir() {
        run_lock
    } else {
        std::env::temp_dir()
    }
}

fn claim_slot() -> (u32, std::fs::File) {
    use std::os::fd::AsRawFd;
    let start = NEXT_SLOT.fetch_add(1, Ordering::SeqCst);
    for i in 0..SLOTS {
        let slot = (start + i) % SLOTS;
        let path = lock_dir().join(format!("osprobe-fleet-slot-{slot}.lock"));
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return (slot, file);
        }
    }
    panic!("every /28 of 198.18.40.0/24 is in use by other fleet tests");
}

pub struct NsHost {
    /// The inventory name (h1, h2, ...).
    pub name: String,
    pub netns: String,
    pub addr: String,
    /// `ssh-ed25519 AAAA...` of this host's sshd.
    pub host_key: String,
    sshd: Option<Child>,
}

pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub hosts: Vec<NsHost>,
    pub bridge: String,
    /// An address on the fleet's subnet that no host has.
    pub nowhere: String,
    veths: Vec<String>,
    /// Held until the fleet is torn down (declared last: dropped last).
    _slot_lock: std::fs::File,
}

fn sshd_program() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/bin/sshd", "/sbin/sshd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run(crate::common::ip_program().to_str().unwrap(), args)
}

fn keygen(path: &Path) -> String {
    let _ = std::fs::remove_file(path);
    run(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "osprobe-fleet-test",
            "-f",
            path.to_str().unwrap(),
        ],
    )
    .expect("ssh-keygen");
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    // "ssh-ed25519 AAAA... comment" -> the type and key.
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Fleet {
    /// `n` hosts, or None (after `skip`) where it cannot run: not root, or
    /// no sshd/ssh.
    pub fn start(test: &str, n: usize) -> Option<Fleet> {
        if !crate::common::need_root(test) {
            return None;
        }
        if sshd_program().is_none() || osprobe_core::find_program("ssh").is_none() {
            osprobe_core::testing::skip(format!(
                "{test} needs OpenSSH (sshd and ssh): apt-get install openssh-server openssh-client"
            ));
            return None;
        }
        let (slot, slot_lock) = claim_slot();
        let base = slot * 16;
        let pid = std::process::id();
        let dir = tempfile::Builder::new()
            .prefix("osprobe-fleet-test-")
            .tempdir()
            .unwrap();
        let bridge = format!("ofl{slot}br");
        let mut fleet = Fleet {
            dir,
            hosts: Vec::new(),
            bridge: bridge.clone(),
            nowhere: format!("198.18.40.{}", base + 14),
            veths: Vec::new(),
            _slot_lock: slot_lock,
        };
        // A leftover of a killed earlier run would be in the way.
        let _ = ip(&["link", "del", &bridge]);
        ip(&["link", "add", &bridge, "type", "bridge"]).unwrap();
        ip(&[
            "addr",
            "add",
            &format!("198.18.40.{}/28", base + 1),
            "dev",
            &bridge,
        ])
        .unwrap();
        ip(&["link", "set", &bridge, "up"]).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();

        let client_key = fleet.dir.path().join("id_ed25519");
        let client_public = keygen(&client_key);
        std::fs::write(fleet.path("authorized_keys"), format!("{client_public}\n")).unwrap();

        for i in 0..n {
            let name = format!("h{}", i + 1);
            let netns = format!("osprobe-fleet-{pid}-{slot}-{i}");
            let addr = format!("198.18.40.{}", base + 2 + i as u32);
            let veth = format!("ofl{slot}v{i}");
            let _ = ip(&["netns", "del", &netns]);
            let _ = ip(&["link", "del", &veth]);
            ip(&["netns", "add", &netns]).unwrap();
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ])
            .unwrap();
            fleet.veths.push(veth.clone());
            ip(&["link", "set", &veth, "master", &bridge, "up"]).unwrap();
            ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{addr}/28"),
                "dev",
                "eth0",
            ])
            .unwrap();
            ip(&["-n", &netns, "link", "set", "eth0", "up"]).unwrap();
            ip(&["-n", &netns, "link", "set", "lo", "up"]).unwrap();
            let host_key_path = fleet.path(&format!("{name}_host_ed25519"));
            let host_key = keygen(&host_key_path);
            fleet.hosts.push(NsHost {
                name,
                netns,
                addr,
                host_key,
                sshd: None,
            });
        }
        for i in 0..n {
            fleet.start_sshd(i, "");
        }
        fleet.write_client_config("known_hosts", None);
        Some(fleet)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Restart host `i`'s sshd with `env` (e.g. `PATH=...`, to give its
    /// sessions other programs) set in its sessions.
    pub fn restart_sshd(&mut self, i: usize, env: &str) {
        if let Some(mut child) = self.hosts[i].sshd.take() {
            // SAFETY: kill(2) of the process group we made for sshd.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
            let _ = child.wait();
        }
        self.start_sshd(i, env);
    }

    /// The temp dir of host `i`'s sessions ($TMPDIR there): where its
    /// token files go, apart from every other process's.
    pub fn tmp_dir(&self, i: usize) -> PathBuf {
        self.path(&format!("tmp-{}", self.hosts[i].name))
    }

    /// What is left in the hosts' temp dirs.
    pub fn tmp_leftovers(&self) -> Vec<PathBuf> {
        (0..self.hosts.len())
            .flat_map(|i| {
                std::fs::read_dir(self.tmp_dir(i))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|e| e.path())
            .collect()
    }

    fn start_sshd(&mut self, i: usize, env: &str) {
        let tmp = self.tmp_dir(i);
        std::fs::create_dir_all(&tmp).unwrap();
        let host = &self.hosts[i];
        let config = self.path(&format!("{}_sshd_config", host.name));
        let dir = self.dir.path().display().to_string();
        std::fs::write(
            &config,
            format!(
                "ListenAddress {addr}\nPort 22\nHostKey {dir}/{name}_host_ed25519\n\
                 PidFile {dir}/{name}_sshd.pid\nAuthorizedKeysFile {dir}/authorized_keys\n\
                 StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nPrintMotd no\nLogLevel ERROR\n\
                 SetEnv TMPDIR={tmp} {env}\n",
                addr = host.addr,
                name = host.name,
                tmp = tmp.display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.path(&format!("{}_sshd.log", host.name))).unwrap();
        let mut cmd = Command::new(crate::common::ip_program());
        cmd.args(["netns", "exec", &host.netns])
            .arg(sshd_program().unwrap())
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("start sshd");
        let addr: SocketAddr = format!("{}:22", host.addr).parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd on {addr} did not listen: {}",
                std::fs::read_to_string(self.path(&format!("{}_sshd.log", host.name)))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.hosts[i].sshd = Some(child);
    }

    /// An ssh client config (-F) trusting the hosts' keys as written in
    /// `known_hosts_name`; with `wrong`, host `wrong.0` is listed with the
    /// key `wrong.1` instead of its own.
    pub fn write_client_config(
        &self,
        known_hosts_name: &str,
        wrong: Option<(usize, &str)>,
    ) -> PathBuf {
        let mut known = String::new();
        for (i, host) in self.hosts.iter().enumerate() {
            let key = match wrong {
                Some((w, key)) if w == i => key.to_string(),
                _ => host.host_key.clone(),
            };
            known.push_str(&format!("{} {key}\n", host.addr));
        }
        std::fs::write(self.path(known_hosts_name), known).unwrap();
        let config = self.path(&format!("{known_hosts_name}.ssh_config"));
        let mut file = std::fs::File::create(&config).unwrap();
        // No known-hosts file is /dev/null: ssh may rewrite one through a
        // temporary file renamed into place, replacing the machine's
        // /dev/null with a regular file.
        write!(
            file,
            "Host *\n  User root\n  IdentityFile {dir}/id_ed25519\n  IdentitiesOnly yes\n  \
             IdentityAgent none\n  UserKnownHostsFile {dir}/{known_hosts_name}\n  \
             GlobalKnownHostsFile {dir}/{known_hosts_name}\n  UpdateHostKeys no\n  \
             StrictHostKeyChecking yes\n  LogLevel ERROR\n",
            dir = self.dir.path().display()
        )
        .unwrap();
        config
    }

    /// The default client config (every host key right).
    pub fn ssh_config(&self) -> PathBuf {
        self.path("known_hosts.ssh_config")
    }

    /// An INI inventory line for host `i`, with its own cache directory
    /// (the hosts share this machine's filesystem) and `extra` variables.
    pub fn host_line(&self, i: usize, extra: &str) -> String {
        let h = &self.hosts[i];
        format!(
            "{} ansible_host={} ansible_user=root osprobe_cache_dir={} {extra}",
            h.name,
            h.addr,
            self.path(&format!("cache-{}", h.name)).display()
        )
    }

    /// Processes in the hosts' namespaces other than the sshd listeners
    /// (e.g. a server left behind), after up to `within` for them to go.
    pub fn stray_processes(&self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        loop {
            let strays = self.processes_in_namespaces(true);
            if strays.is_empty() || Instant::now() > deadline {
                return strays;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The namespaces' inodes: /run/netns entries are nsfs bind mounts.
    fn namespace_inodes(&self) -> Vec<u64> {
        self.hosts
            .iter()
            .filter_map(|h| std::fs::metadata(format!("/run/netns/{}", h.netns)).ok())
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .collect()
    }

    /// (pid, command line) of every process in a host namespace.
    fn processes_in_namespaces(&self, skip_sshd_listeners: bool) -> Vec<String> {
        let inodes = self.namespace_inodes();
        // `ip netns exec` execs sshd: the child's pid is the listener's.
        let listeners: Vec<u32> = self
            .hosts
            .iter()
            .filter_map(|h| h.sshd.as_ref().map(|c| c.id()))
            .collect();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if crate::common::is_zombie_or_gone(pid) {
                continue;
            }
            let Some(ino) = crate::common::net_inode(&entry.path().join("ns/net")) else {
                continue;
            };
            if !inodes.contains(&ino) || (skip_sshd_listeners && listeners.contains(&pid)) {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            found.push(format!("{pid}: {cmdline}"));
        }
        found
    }

    /// Kill every process in the namespaces (sshd and its sessions):
    /// SIGTERM first, so that a shell left by a failed test still runs its
    /// exit trap (removing its temp files), then SIGKILL.
    fn kill_all(&self) {
        for line in self.processes_in_namespaces(false) {
            if let Some(pid) = line.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill(2) of a process found in our namespaces.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.processes_in_namespaces(false).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..50 {
            let left = self.processes_in_namespaces(false);
            if left.is_empty() {
                return;
            }
            for line in left {
                if let Some(pid) = line.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
                    // SAFETY: kill(2) of a process found in our namespaces.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for host in &mut self.hosts {
            if let Some(mut child) = host.sshd.take() {
                // SAFETY: kill(2) of the process group we made for sshd.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
                let _ = child.wait();
                host.sshd = None;
            }
        }
        self.kill_all();
        for host in &self.hosts {
            let _ = ip(&["netns", "del", &host.netns]);
        }
        for veth in &self.veths {
            let _ = ip(&["link", "del", veth]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
