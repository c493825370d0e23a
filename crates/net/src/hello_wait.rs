//! Waiting for the server's hello on a path that loses packets.
//!
//! The serve protocol has the server speak first, so after `connect`
//! returns the client sends nothing but its handshake ACK. When that ACK is
//! lost (the emulator's `loss` drops the client-to-server direction, as a
//! lossy network would), the server's side stays in SYN-RECV and Linux
//! repairs it only by resending its SYN-ACK, 1, 3, 7, 15 and 31 s after the
//! first (the initial 1 s timeout doubled, `tcp_synack_retries` 5; the
//! server gives up at 63 s); each resend draws one more ACK from the
//! client. At 20% loss four lost ACKs in a row (1 connection in 625) put
//! the hello 15 s out, past the flat 10 s reply timeout: the "timed out
//! waiting for the peer" while reading the hello.
//!
//! The client's own TCP_INFO shows that case: segments arrived (the resent
//! SYN-ACKs, `segs_in` above 1) and not a byte of data. While that is what
//! the connection shows, the server is alive and still finishing the
//! handshake, so [`keep_waiting`] says wait on, up to the server's own
//! give-up time ([`SYNACK_GIVE_UP`]). A server that sends nothing at all
//! still fails at the reply timeout, and the error carries what TCP_INFO
//! said ([`HelloWait`]).
//!
//! The SYN itself crosses the same lossy direction: Linux resends it 1, 3,
//! 7, 15, 31 and 63 s after the first (`tcp_syn_retries` 6), so a flat 5 s
//! connect timeout fails once three SYNs in a row are lost (1 connection
//! in 125 at 20% loss). On a path configured with loss, the connect
//! timeout is [`LOSSY_CONNECT_TIMEOUT`] instead ([`connect_timeout`]).

use crate::tcp_info::TcpInfo;
use std::fmt;
use std::time::Duration;

/// When a Linux server stops resending its SYN-ACK and drops the
/// half-open connection: 1 + 2 + 4 + 8 + 16 + 32 s (`tcp_synack_retries`
/// 5, the default).
pub const SYNACK_GIVE_UP: Duration = Duration::from_secs(63);

/// How long a connect may take on a path that loses packets: past the
/// kernel's sixth SYN resend (63 s), so only seven SYNs lost in a row fail
/// (1 in 78,000 connections at 20% loss).
pub const LOSSY_CONNECT_TIMEOUT: Duration = Duration::from_secs(64);

/// The connect timeout for a path: `usual` unless it drops packets towards
/// the server.
pub fn connect_timeout(usual: Duration, lossy: bool) -> Duration {
    if lossy {
        usual.max(LOSSY_CONNECT_TIMEOUT)
    } else {
        usual
    }
}

/// The client's connection while it waits for the hello, from TCP_INFO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloWait {
    /// TCP state (1 is ESTABLISHED).
    pub state: u8,
    /// Bytes of data received: 0 while no hello came.
    pub bytes_received: u64,
    /// Segments received, the SYN-ACK and any resent ones included.
    pub segments_in: u32,
    /// Retransmissions of this side's data, in all.
    pub retransmits: u32,
    /// This side's retransmission timeout.
    pub rto: Duration,
    /// This side's bytes sent and not yet acknowledged, in segments.
    pub unacked: u32,
}

impl HelloWait {
    pub fn from_info(info: &TcpInfo) -> HelloWait {
        HelloWait {
            state: info.state,
            bytes_received: info.bytes_received.unwrap_or(0),
            segments_in: info.segs_in.unwrap_or(0),
            retransmits: info.total_retrans,
            rto: Duration::from_micros(info.rto_us as u64),
            unacked: info.unacked,
        }
    }

    /// The server resent its SYN-ACK and has sent no data: it never got
    /// this side's handshake ACK, and is still trying.
    pub fn handshake_unfinished(&self) -> bool {
        self.bytes_received == 0 && self.segments_in > 1
    }
}

/// After `waited` without a hello, whether to go on waiting.
pub fn keep_waiting(seen: Option<&HelloWait>, waited: Duration) -> bool {
    seen.is_some_and(HelloWait::handshake_unfinished) && waited < SYNACK_GIVE_UP
}

impl fmt::Display for HelloWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = TcpInfo {
            state: self.state,
            ..TcpInfo::default()
        };
        write!(
            f,
            "the connection: {}, {} B received in {} segments, {} retransmits, rto {} ms, {} unacked",
            state.state_name(),
            self.bytes_received,
            self.segments_in,
            self.retransmits,
            self.rto.as_millis(),
            self.unacked
        )?;
        if self.handshake_unfinished() {
            write!(
                f,
                "; the server resent its SYN-ACK {} times: this side's handshake ACKs were lost on the path",
                self.segments_in - 1
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(bytes_received: u64, segments_in: u32) -> HelloWait {
        HelloWait {
            state: 1,
            bytes_received,
            segments_in,
            retransmits: 0,
            rto: Duration::from_millis(204),
            unacked: 0,
        }
    }

    #[test]
    fn a_server_resending_its_synack_is_waited_for_until_it_gives_up() {
        let resending = seen(0, 4);
        assert!(keep_waiting(Some(&resending), Duration::from_secs(10)));
        assert!(keep_waiting(Some(&resending), Duration::from_secs(62)));
        assert!(!keep_waiting(Some(&resending), SYNACK_GIVE_UP));
        // Only the SYN-ACK came: the handshake is done, the server silent.
        assert!(!keep_waiting(Some(&seen(0, 1)), Duration::from_secs(10)));
        // Part of a frame came: a slow server, not a lost handshake.
        assert!(!keep_waiting(Some(&seen(3, 4)), Duration::from_secs(10)));
        assert!(!keep_waiting(None, Duration::from_secs(10)));
    }

    #[test]
    fn a_lossy_path_waits_out_the_kernels_syn_resends() {
        let usual = Duration::from_secs(5);
        assert_eq!(connect_timeout(usual, false), usual);
        assert_eq!(connect_timeout(usual, true), LOSSY_CONNECT_TIMEOUT);
        // The sixth resend leaves 63 s after the first SYN.
        assert!(LOSSY_CONNECT_TIMEOUT > Duration::from_secs(63));
    }

    #[test]
    fn the_diagnosis_names_the_lost_handshake_acks() {
        let text = seen(0, 4).to_string();
        assert!(text.contains("ESTABLISHED"), "{text}");
        assert!(text.contains("0 B received in 4 segments"), "{text}");
        assert!(text.contains("rto 204 ms"), "{text}");
        assert!(text.contains("resent its SYN-ACK 3 times"), "{text}");
        assert!(!seen(0, 1).to_string().contains("SYN-ACK"));
    }
}
