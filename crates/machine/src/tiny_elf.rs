//! A minimal static executable, written by osprobe itself, for proc.spawn.
//!
//! The ELF file is one header, one loadable segment and three instructions
//! that call exit(0): no dynamic loader, no libc, nothing to relocate. Timing
//! its spawn isolates the kernel's cost of creating a process and loading an
//! ELF image (the SOS design document section 9) from the dynamic loader's work, which a
//! dynamic binary such as /bin/true adds on top.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const BASE: u64 = 0x40_0000;
const EHDR_SIZE: u64 = 64;
const PHDR_SIZE: u64 = 56;

/// The machine code of `exit(0)` and the ELF machine number, per architecture.
fn exit_code_for_arch() -> Option<(u16, &'static [u8])> {
    match std::env::consts::ARCH {
        // mov eax, 60 (exit); xor edi, edi; syscall
        "x86_64" => Some((0x3e, &[0xb8, 0x3c, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05])),
        // mov x0, #0; mov x8, #93 (exit); svc #0
        "aarch64" => Some((
            0xb7,
            &[
                0x00, 0x00, 0x80, 0xd2, 0xa8, 0x0b, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4,
            ],
        )),
        _ => None,
    }
}

/// The ELF machine number (e_machine) of this architecture, if osprobe
/// knows it.
pub fn machine_for_arch() -> Option<u16> {
    exit_code_for_arch().map(|(machine, _)| machine)
}

/// The bytes of the executable for this architecture, if osprobe knows it.
pub fn image() -> Option<Vec<u8>> {
    let (machine, code) = exit_code_for_arch()?;
    let entry_offset = EHDR_SIZE + PHDR_SIZE;
    let file_size = entry_offset + code.len() as u64;
    let mut elf = Vec::with_capacity(file_size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type: executable
    elf.extend_from_slice(&machine.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&(BASE + entry_offset).to_le_bytes()); // e_entry
    elf.extend_from_slice(&EHDR_SIZE.to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    elf.extend_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
    elf.extend_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
    elf.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    elf.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
                                    // The one PT_LOAD segment maps the whole file read + execute.
    elf.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // p_flags: R + X
    elf.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    elf.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    elf.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    elf.extend_from_slice(&file_size.to_le_bytes()); // p_filesz
    elf.extend_from_slice(&file_size.to_le_bytes()); // p_memsz
    elf.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    elf.extend_from_slice(code);
    debug_assert_eq!(elf.len() as u64, file_size);
    Some(elf)
}

/// The executable written to a private temporary directory, removed on drop.
pub struct StaticTrue {
    dir: PathBuf,
    path: PathBuf,
}

impl StaticTrue {
    /// Write the executable under `parent` (normally the temp directory).
    pub fn create_in(parent: &Path) -> io::Result<StaticTrue> {
        let image = image().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "no built-in static executable for {}",
                    std::env::consts::ARCH
                ),
            )
        })?;
        // Named with its owner, so a killed process's copy is swept.
        let dir = parent.join(osprobe_core::owner::Owner::new_name("osprobe-elf-"));
        std::fs::create_dir(&dir)?;
        let path = dir.join("static-true");
        let written = (|| {
            let mut f = std::fs::File::create(&path)?;
            f.write_all(&image)?;
            f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
            f.sync_all()
        })();
        let me = StaticTrue { dir, path };
        written.map(|_| me)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StaticTrue {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_executable_runs_and_exits_zero() {
        let Some(_) = image() else {
            osprobe_core::testing::skip("no static executable image for this architecture");
            return;
        };
        let dir = std::env::temp_dir();
        let exe = StaticTrue::create_in(&dir).unwrap();
        let status = std::process::Command::new(exe.path()).status().unwrap();
        assert!(status.success(), "{status:?}");
        let kept = exe.dir.clone();
        drop(exe);
        assert!(!kept.exists(), "temporary directory removed");
    }
}
