//! The rfs decoders never panic: requests (as datagrams and as a TCP
//! stream), replies and names, each driven through valid seeds plus the
//! corpus of tricky inputs, every prefix of them and a few thousand
//! deterministic mutations (the bounded twin of the cargo-fuzz targets in
//! `fuzz/`). What decodes round-trips through the encoder.

use osprobe_core::testing::check_decoder;
use osprobe_rfs::fuzz;
use osprobe_rfs::protocol::{
    encode_reply, encode_request, Attr, CreateHow, DirEntry, ErrorCode, Handle, Kind, Op,
    RemoteError, Reply, Request, COOKIE_LEN,
};
use std::path::Path;

/// Mutations per decoder: a few thousand, well under a second each.
const CASES: usize = 4000;

const FILE: Handle = Handle([7; 16]);

/// The corpus of tricky inputs in `tests/corpus`.
fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn valid_requests() -> Vec<Vec<u8>> {
    let requests = [
        Request::Hello {
            nonce: [3; 16],
            cookie: [0; COOKIE_LEN],
        },
        Request::Hello {
            nonce: [3; 16],
            cookie: [7; COOKIE_LEN],
        },
        Request::Auth { proof: [9; 32] },
        Request::Goodbye,
        Request::Lookup {
            dir: FILE,
            name: b"a.bin",
        },
        Request::Create {
            dir: FILE,
            name: b"new",
            mode: 0o644,
            how: CreateHow::Truncate,
        },
        Request::Read {
            file: FILE,
            offset: 4096,
            count: 8192,
        },
        Request::Write {
            file: FILE,
            offset: 1 << 40,
            data: b"some bytes to write",
        },
        Request::Getattr { handle: FILE },
        Request::Readdir {
            dir: FILE,
            cookie: 3,
            max_entries: 64,
        },
        Request::Remove {
            dir: FILE,
            name: b"old",
        },
        Request::Hash { file: FILE },
        Request::Commit { file: FILE },
        Request::PutBegin {
            dir: FILE,
            name: b"new",
            mode: 0o644,
            size: 0,
        },
        Request::PutCommit { upload: FILE },
        Request::PutAbort { upload: FILE },
    ];
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut out = Vec::new();
            encode_request(0x1122_3344_5566_7788, i as u64, r, &mut out).unwrap();
            out
        })
        .collect()
}

fn valid_replies() -> Vec<Vec<u8>> {
    let attr = Attr {
        kind: Kind::File,
        mode: 0o644,
        size: 12345,
        mtime_ns: 1_700_000_000_000_000_000,
        atime_ns: -1,
    };
    let replies: [(Op, Result<Reply<'_>, RemoteError>); 12] = [
        (
            Op::Hello,
            Ok(Reply::Retry {
                cookie: [4; COOKIE_LEN],
            }),
        ),
        (Op::PutBegin, Ok(Reply::Handle { handle: FILE, attr })),
        (
            Op::Hello,
            Ok(Reply::Welcome {
                nonce: [5; 32],
                auth_required: true,
                root: FILE,
                max_data: 8192,
                drc_span: 256,
            }),
        ),
        (Op::Remove, Ok(Reply::Done)),
        (Op::Commit, Ok(Reply::Done)),
        (Op::Lookup, Ok(Reply::Handle { handle: FILE, attr })),
        (
            Op::Read,
            Ok(Reply::Data {
                size: 12345,
                eof: true,
                data: b"file contents",
            }),
        ),
        (
            Op::Write,
            Ok(Reply::Written {
                count: 19,
                size: 12345,
            }),
        ),
        (Op::Getattr, Ok(Reply::Attr(attr))),
        (
            Op::Readdir,
            Ok(Reply::Entries {
                eof: false,
                entries: vec![
                    DirEntry {
                        cookie: 1,
                        kind: Kind::Dir,
                        name: b"sub".to_vec(),
                    },
                    DirEntry {
                        cookie: 2,
                        kind: Kind::Symlink,
                        name: b"link\xff".to_vec(),
                    },
                ],
            }),
        ),
        (
            Op::Hash,
            Ok(Reply::Hash {
                size: 12345,
                hash: [0xab; 16],
            }),
        ),
        (
            Op::Lookup,
            Err(RemoteError::new(ErrorCode::NoEnt, "no such file: a.bin")),
        ),
    ];
    replies
        .iter()
        .enumerate()
        .map(|(i, (op, result))| {
            let mut out = Vec::new();
            encode_reply(0x1122_3344_5566_7788, i as u64, *op, result, &mut out).unwrap();
            out
        })
        .collect()
}

/// `body` with the TCP transport's 4-byte length prefix.
fn framed(body: &[u8]) -> Vec<u8> {
    [&(body.len() as u32).to_be_bytes()[..], body].concat()
}

#[test]
fn requests_never_panic_and_round_trip() {
    let seeds = [valid_requests(), corpus()].concat();
    check_decoder("rfs_request", seeds, CASES, fuzz::request);
}

#[test]
fn replies_never_panic_and_round_trip() {
    check_decoder("rfs_reply", valid_replies(), CASES, fuzz::reply);
}

#[test]
fn tcp_streams_never_panic() {
    // Read sizes of 1, 7 and 255 bytes; several frames back to back.
    let requests = valid_requests();
    let all: Vec<u8> = requests.iter().flat_map(|r| framed(r)).collect();
    let seeds: Vec<Vec<u8>> = [1u8, 7, 255]
        .iter()
        .map(|&size| [&[size][..], &all].concat())
        .chain(requests.iter().map(|r| [&[16u8][..], &framed(r)].concat()))
        .collect();
    check_decoder("rfs_tcp_stream", seeds, CASES / 4, fuzz::tcp_stream);
}

#[test]
fn names_never_panic_and_print_without_control_characters() {
    let seeds: [&[u8]; 5] = [
        b"report.html",
        b"..",
        b"a/b",
        b"\x1b[31mred\x1b[0m\n",
        "caf\u{e9} \u{202e}txt".as_bytes(),
    ];
    check_decoder("rfs_name", seeds, CASES, fuzz::name);
}
