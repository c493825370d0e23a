//! `link`: a command behind an emulated link.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
CMD runs in namespace A with its peer's address in $OSPROBE_LINK_PEER (also $MAHIMAHI_BASE); \
B is reachable only through the emulator. Quote variables so that your shell leaves them to \
osprobe: `osprobe link --delay 50ms --serve -- osprobe net rtt --to '$OSPROBE_LINK_PEER'` \
(osprobe replaces $OSPROBE_LINK_PEER in CMD's arguments), or run a shell: \
`-- sh -c 'ping -c 3 $OSPROBE_LINK_PEER'`. Something must listen in B: --serve, or \
`nsenter --net=$OSPROBE_LINK_NS_B ...` from within CMD ($OSPROBE_LINK_NS_A/B are paths to the \
namespaces, which have no names: they, their devices and CMD die with osprobe, even by kill -9).\n\
Delay, jitter, loss, rate and queue apply to both directions (uplink: A->B, downlink: B->A); \
a trace replaces the rate for its direction. Needs root.\n\
With --to HOST the emulator is a middlebox in front of a real host: CMD still runs in A, and its \
traffic to HOST ($OSPROBE_LINK_PEER) crosses the emulator and then this host's own routing, \
masqueraded to this host's address (an nftables table and forwarding on the outgoing device, \
removed afterwards): `osprobe link --to 192.0.2.7 --delay 50ms -- ping -c 3 192.0.2.7`.")]
pub struct LinkArgs {
    /// One-way delay each way, e.g. 50ms, 250us
    #[arg(long, value_name = "DELAY", default_value = "0ms")]
    pub delay: String,
    /// Jitter around the delay, e.g. 1ms (packets are never reordered)
    #[arg(long, value_name = "JITTER")]
    pub jitter: Option<String>,
    /// Distribution of the jitter: uniform (+-JITTER) or normal (sd JITTER)
    #[arg(long, value_name = "DIST", default_value = "uniform")]
    pub jitter_dist: String,
    /// Loss each way: 1%, 0.5%, or ge:p=1%,r=25%[,bad=100%][,good=0%] (Gilbert-Elliott bursts)
    #[arg(long, value_name = "LOSS")]
    pub loss: Option<String>,
    /// Loss from A to B only (overrides --loss)
    #[arg(long, value_name = "LOSS")]
    pub uplink_loss: Option<String>,
    /// Loss from B to A only (overrides --loss)
    #[arg(long, value_name = "LOSS")]
    pub downlink_loss: Option<String>,
    /// Capacity each way, e.g. 100mbit, 1gbit, 10kbit
    #[arg(long, value_name = "RATE")]
    pub rate: Option<String>,
    /// Drop-tail queue in front of the rate or trace: 1000p, 64kb, 1mb, unlimited (default)
    #[arg(long, value_name = "SIZE")]
    pub queue: Option<String>,
    /// Mahimahi trace for A->B: one ms timestamp per 1500-byte delivery opportunity
    #[arg(long, value_name = "FILE")]
    pub uplink_trace: Option<PathBuf>,
    /// Mahimahi trace for B->A
    #[arg(long, value_name = "FILE")]
    pub downlink_trace: Option<PathBuf>,
    /// Seed of the loss and jitter draws (default: from the clock; printed)
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Run an osprobe server in B on $OSPROBE_LINK_PEER:5301 while CMD runs
    #[arg(long)]
    pub serve: bool,
    /// Put the emulator in front of a real host: CMD's traffic to HOST (in $OSPROBE_LINK_PEER) crosses the emulator, then leaves through this host's routing, masqueraded (needs nft)
    #[arg(long, value_name = "HOST", conflicts_with_all = ["serve", "reference_veth"])]
    pub to: Option<String>,
    /// Also join A and B by a plain veth pair (peer address in $OSPROBE_LINK_REFERENCE_PEER), for comparisons
    #[arg(long)]
    pub reference_veth: bool,
    /// TCP buffer ceiling in both namespaces (the maximum of tcp_wmem and tcp_rmem), e.g. 256M; default: a new namespace's (4 MiB to send)
    #[arg(long, value_name = "SIZE")]
    pub wmem: Option<String>,
    /// MTU of the emulated link
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    pub mtu: u32,
    /// Make the kernel hand over every wire packet separately (no 64 KB TCP batches; slower)
    #[arg(long)]
    pub no_offload: bool,
    /// Forward at normal priority (default: SCHED_FIFO at the lowest real-time priority, for timing)
    #[arg(long)]
    pub no_realtime: bool,
    /// Also write the report as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The command to run in namespace A, and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}
