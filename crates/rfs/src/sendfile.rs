//! A TCP reply's data straight from the file: the reply's header is sent
//! with MSG_MORE (the kernel holds it for the bytes that follow instead of
//! pushing a segment of its own, TCP_NODELAY notwithstanding), then the
//! data with sendfile(2), whose pages the kernel hands to the socket by
//! reference. A pread into a buffer and a send of it would copy every byte
//! twice on the server; this copies it not at all (the receiver's read is
//! the one copy, as for a plain stream).

use std::fs::File;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Send all of `bytes` on `sock`, telling the kernel more follows.
pub(crate) fn send_more(sock: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, which outlives
        // the call; send only reads them.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_MORE | libc::MSG_NOSIGNAL,
            )
        };
        match n {
            n if n > 0 => bytes = &bytes[n as usize..],
            0 => return Err(io::ErrorKind::WriteZero.into()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Send `len` bytes of `file` from `offset` on `sock`. A file that ends
/// sooner (shrunk since its size was read) is an error: the reply's
/// header has promised `len` bytes, and the caller must close the stream
/// rather than send anything else in their place.
pub(crate) fn send_file(sock: &TcpStream, file: &File, offset: u64, len: usize) -> io::Result<()> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
    let mut left = len;
    while left > 0 {
        // SAFETY: both descriptors are open for the call; `off` is a valid
        // off_t the kernel advances by what it sent.
        let n = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, left) };
        match n {
            n if n > 0 => left -= n as usize,
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ended {left} bytes short of the {len} its reply announced"),
                ))
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_header_and_file_data_arrive_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let f = File::open(&path).unwrap();
        let (tx, mut rx) = pair();
        send_more(&tx, b"head").unwrap();
        send_file(&tx, &f, 1000, 50_000).unwrap();
        drop(tx);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &data[1000..51_000]);
    }

    #[test]
    fn a_file_shorter_than_promised_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [7u8; 1000]).unwrap();
        let f = File::open(&path).unwrap();
        let (tx, _rx) = pair();
        let e = send_file(&tx, &f, 500, 1000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("500 bytes short"), "{e}");
    }
}
