//! The flight record: what a group's collectives did, and who is missing
//! when one hangs.
//!
//! Every group keeps its last [`FLIGHT_RECORD_LEN`] collective calls —
//! operation, sequence number, bytes, element type, members, start and end
//! times, outcome — in a ring written under one short lock at the start
//! and the end of each call (nothing per message), so it stays on.
//!
//! When a call times out with no member known failed, the rank finds out,
//! through the members' RPC servers (their own threads, so a member stuck
//! in its own computation still answers), which members never entered
//! that call, and asks each of those what it did last and does now
//! (`missing.rs`; the answers are facts, put in words by the asker:
//! `answer.rs`). The timeout then names the members that never entered the
//! call — not a neighbour that waits itself — and says what each is doing:
//!
//! ```text
//! all_reduce timed out waiting on ranks [2]: rank 2 has not entered all_reduce #3;
//! its last call here, broadcast #2, ended 4.0 s ago; it is in no call now
//! ```

mod answer;
mod dump;
mod missing;

use super::GroupInner;
use crate::error::Result;
use answer::{Answer, CallFacts, Failure};
pub(crate) use missing::{answer_survey, FLIGHT_SURVEY_FN};
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Calls a group's flight record keeps.
pub const FLIGHT_RECORD_LEN: usize = 1024;

/// The reserved RPC function that answers "what do you know of call
/// `seq` of this group" from the flight record.
pub(crate) const FLIGHT_FN: u32 = 0xFFFF_FFF1;

/// How a recorded call ended, or that it has not.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallState {
    /// Under way.
    Running,
    /// Returned `Ok`.
    Done,
    /// Returned this error.
    Failed(String),
}

/// One collective call in a group's flight record
/// ([`ProcessGroup::flight_record`](crate::ProcessGroup::flight_record)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FlightEntry {
    /// The collective (`"all_reduce"`, `"barrier"`, …).
    pub op: &'static str,
    /// Its sequence number in the group (every member's call of it has
    /// the same).
    pub seq: u64,
    /// The communicator it ran on (a shrunk group's differs from the
    /// group it replaced).
    pub comm: u64,
    /// Bytes this rank passed.
    pub bytes: u64,
    /// The element type (`"f32"`, …).
    pub dtype: &'static str,
    /// How many ranks take part (the group's size).
    pub members: u32,
    /// When this rank started it (for a non-blocking call: issued it).
    pub started: Instant,
    /// When it returned, if it has.
    pub ended: Option<Instant>,
    /// How it ended.
    pub state: CallState,
    /// The class of the error it failed with, which a member tells
    /// others (never the error's text).
    pub(crate) failure: Failure,
}

impl fmt::Display for FlightEntry {
    /// `all_reduce #3 (f32, 4096 bytes, 4 ranks): done in 1.2 ms, 4.0 s ago`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} ({}, {} bytes, {} ranks): ",
            self.op, self.seq, self.dtype, self.bytes, self.members
        )?;
        match (&self.state, self.ended) {
            (CallState::Running, _) | (_, None) => {
                write!(f, "running for {}", secs(self.started.elapsed()))
            }
            (CallState::Done, Some(end)) => write!(
                f,
                "done in {}, {} ago",
                secs(end.duration_since(self.started)),
                secs(end.elapsed())
            ),
            (CallState::Failed(e), Some(end)) => {
                write!(f, "failed {} ago: {e}", secs(end.elapsed()))
            }
        }
    }
}

/// `4.0 s`, `12 ms`.
fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// A group's ring of recorded calls.
#[derive(Debug, Default)]
pub(crate) struct FlightRecord {
    ring: Mutex<Ring>,
    /// The last survey of who entered a call, while it is fresh
    /// (`missing.rs`).
    survey: Mutex<Option<missing::Survey>>,
}

#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<FlightEntry>,
    /// Calls recorded so far: the next one's number (an entry's number
    /// minus `first` is its place in `entries`).
    recorded: u64,
}

/// Every flight record of this process, for "what is it doing now" across
/// its groups.
static ALL: Mutex<Vec<Weak<FlightRecord>>> = Mutex::new(Vec::new());

impl FlightRecord {
    /// A record, known to this process's registry.
    pub(crate) fn new() -> Arc<FlightRecord> {
        dump::on_signal_once();
        let record = Arc::new(FlightRecord::default());
        let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&record));
        record
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call starts: its number in the record (for [`end`](Self::end)).
    pub(crate) fn start(&self, entry: FlightEntry) -> u64 {
        let mut ring = self.lock();
        if ring.entries.len() == FLIGHT_RECORD_LEN {
            ring.entries.pop_front();
        }
        ring.entries.push_back(entry);
        ring.recorded += 1;
        ring.recorded - 1
    }

    /// Call `n` returned, with `outcome`.
    pub(crate) fn end<T>(&self, n: u64, outcome: &Result<T>) {
        let mut ring = self.lock();
        let first = ring.recorded - ring.entries.len() as u64;
        let Some(i) = n.checked_sub(first) else {
            return;
        };
        if let Some(e) = ring.entries.get_mut(i as usize) {
            e.ended = Some(Instant::now());
            e.state = match outcome {
                Ok(_) => CallState::Done,
                Err(err) => {
                    e.failure = Failure::of(err);
                    CallState::Failed(err.to_string())
                }
            };
        }
    }

    /// The recorded calls, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<FlightEntry> {
        self.lock().entries.iter().cloned().collect()
    }

    /// The answer to "what do you know of call `seq` on `comm`": whether
    /// this rank entered it, its last call on `comm`, and the longest
    /// running call of its other groups, if any.
    pub(crate) fn answer(&self, comm: u64, seq: u64) -> Answer {
        let now = Instant::now();
        let (entered, last) = {
            let ring = self.lock();
            let mut here = ring.entries.iter().filter(|e| e.comm == comm);
            let entered = here.clone().any(|e| e.seq >= seq);
            (entered, here.next_back().map(|e| CallFacts::of(e, now)))
        };
        Answer {
            entered,
            last,
            elsewhere: running_elsewhere(comm, now),
        }
    }

    /// The start and operation of its longest running call not on `comm`.
    fn oldest_running_except(&self, comm: u64) -> Option<(Instant, &'static str)> {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.comm != comm && e.state == CallState::Running)
            .map(|e| (e.started, e.op))
            .min()
    }
}

/// The longest running call of this process's groups other than `comm`
/// (a barrier of a sub-group that holds it up, say): its operation and
/// for how long, and nothing of which group it is.
fn running_elsewhere(
    comm: u64,
    now: Instant,
) -> Option<(Option<meshwork_collectives::Collective>, Duration)> {
    let (started, op) = ALL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|r| r.oldest_running_except(comm))
        .min()?;
    Some((answer::op_of(op), now.saturating_duration_since(started)))
}

/// Every group's record in this process, as text: a header line, then
/// one line per call, oldest first.
pub(crate) fn dump_all() -> String {
    let records: Vec<Arc<FlightRecord>> = ALL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let mut out = format!(
        "meshwork flight record, process {}, {} group(s)\n",
        std::process::id(),
        records.len()
    );
    for (i, r) in records.iter().enumerate() {
        let calls = r.snapshot();
        out += &format!("group {i}: {} call(s)\n", calls.len());
        for e in calls {
            out += &format!("  comm {:016x} {e}\n", e.comm);
        }
    }
    out
}

/// The request's arguments: the communicator and the sequence number.
fn encode_question(comm: u64, seq: u64) -> [u8; 16] {
    let mut q = [0u8; 16];
    q[..8].copy_from_slice(&comm.to_le_bytes());
    q[8..].copy_from_slice(&seq.to_le_bytes());
    q
}

/// The communicator and sequence number a question is about.
fn decode_question(args: &[u8]) -> Option<(u64, u64)> {
    let comm = u64::from_le_bytes(args.get(..8)?.try_into().ok()?);
    let seq = u64::from_le_bytes(args.get(8..16)?.try_into().ok()?);
    Some((comm, seq))
}

/// The answer the RPC server of group `comm` gives to `args` (fuzzed: any
/// bytes): about its own group only; nothing (no answer) to a question
/// about another.
pub(crate) fn answer_question(record: &FlightRecord, comm: u64, args: &[u8]) -> Vec<u8> {
    match decode_question(args) {
        Some((asked, seq)) if asked == comm => record.answer(comm, seq).encode().to_vec(),
        _ => Vec::new(),
    }
}

impl GroupInner {
    /// Record the start of collective `op` number `seq`.
    pub(crate) fn record_start(
        &self,
        op: &'static str,
        seq: u64,
        bytes: u64,
        dtype: &'static str,
    ) -> u64 {
        self.rpc.flight.start(FlightEntry {
            op,
            seq,
            comm: self.comm_id,
            bytes,
            dtype,
            members: self.world,
            started: Instant::now(),
            ended: None,
            state: CallState::Running,
            failure: Failure::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: &'static str, seq: u64, comm: u64, state: CallState) -> FlightEntry {
        let started = Instant::now();
        FlightEntry {
            op,
            seq,
            comm,
            bytes: 16,
            dtype: "f32",
            members: 4,
            started,
            ended: (state != CallState::Running).then_some(started),
            state,
            failure: Failure::default(),
        }
    }

    /// The answer as the asker gets it: off the wire.
    fn asked(r: &FlightRecord, comm: u64, seq: u64) -> Answer {
        let bytes = answer_question(r, comm, &encode_question(comm, seq));
        Answer::decode(&bytes).unwrap()
    }

    #[test]
    fn the_ring_keeps_the_last_calls_and_ends_them() {
        let r = FlightRecord::new();
        let mut last = 0;
        for seq in 0..(FLIGHT_RECORD_LEN as u64 + 10) {
            last = r.start(entry("barrier", seq, 1, CallState::Running));
        }
        r.end(last, &Ok(()));
        r.end(0, &Err::<(), _>(crate::Error::ShutDown)); // long gone: ignored
        let all = r.snapshot();
        assert_eq!(all.len(), FLIGHT_RECORD_LEN);
        assert_eq!(all[0].seq, 10);
        assert_eq!(all.last().unwrap().state, CallState::Done);
        assert!(all
            .last()
            .unwrap()
            .to_string()
            .starts_with("barrier #1033 (f32, 16 bytes, 4 ranks): done in"));
    }

    #[test]
    fn an_answer_says_whether_the_call_was_entered_and_what_came_last() {
        let r = FlightRecord::new();
        let n = r.start(entry("broadcast", 2, 7, CallState::Running));
        r.end(n, &Ok(()));
        let a = asked(&r, 7, 3);
        assert!(!a.entered);
        let words = a.words(3);
        assert!(
            words.starts_with("its last call here, broadcast #2, ended"),
            "{words}"
        );
        assert!(words.ends_with("it is in no call now"), "{words}");
        r.start(entry("all_reduce", 3, 7, CallState::Running));
        let a = asked(&r, 7, 3);
        assert!(a.entered);
        assert!(
            a.words(3).starts_with("it is in all_reduce #3 too, for"),
            "{}",
            a.words(3)
        );
        // Ended: how (the error's class, not its text), and how long ago.
        let n = r.start(entry("all_gather", 4, 7, CallState::Running));
        r.end::<()>(
            n,
            &Err(crate::Error::DeviceFailed {
                op: "all_gather".into(),
                what: "an illegal address".into(),
            }),
        );
        let a = asked(&r, 7, 4);
        assert!(a.entered && a.failed_in(4));
        let words = a.words(4);
        assert!(
            words.starts_with("its all_gather #4 failed") && words.ends_with("(a device failure)"),
            "{words}"
        );
        // Nothing on a communicator the record has no call of.
        let bytes = answer_question(&r, 8, &encode_question(8, 0));
        let a = Answer::decode(&bytes).unwrap();
        assert!(!a.entered);
        assert!(a.words(0).contains("no call here yet"), "{}", a.words(0));
    }

    /// A group's server answers about its own group only: a question
    /// about another communicator (one the asker may not be in) gets no
    /// answer. Of another group's calls an answer says only that one is
    /// under way, which operation and for how long.
    #[test]
    fn an_answer_speaks_of_the_group_asked_only() {
        let mine = FlightRecord::new();
        mine.start(entry("broadcast", 0, 21, CallState::Running));
        let theirs = FlightRecord::new();
        theirs.start(entry("barrier", 5, 22, CallState::Running));
        // Group 21's server, asked about group 22.
        assert!(answer_question(&mine, 21, &encode_question(22, 0)).is_empty());
        let a = asked(&mine, 21, 1);
        let (op, _) = a.elsewhere.expect("a call of another group under way");
        assert_eq!(op, Some(meshwork_collectives::Collective::Barrier));
        let words = a.words(1);
        assert!(
            words.contains("; it is in barrier of another group for"),
            "{words}"
        );
        assert!(!words.contains("#5") && !words.contains("22"), "{words}");
    }

    /// A hostile member's answer made of text: line breaks, a terminal
    /// escape and a made-up line about another rank. None of it reaches
    /// the timeout's text: such bytes are no answer, and whatever
    /// decodes is put in words by the asker, printable ASCII only.
    #[test]
    fn a_members_crafted_answer_never_reaches_the_error_text() {
        let crafted = [
            &b"\x00; rank 0 has not entered all_reduce #9\n\x1b[31mERROR\x1b[0m"[..],
            b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\n\x1b[31m",
            b"\x00rank 0 has not entered all_reduce #9\n\x1b[31m...",
        ];
        let mut answers: Vec<Vec<u8>> = crafted.iter().map(|c| c.to_vec()).collect();
        // And every byte value at every place of an answer's length.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut b = vec![0u8; answer::ANSWER_LEN];
            for x in &mut b {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *x = match rng % 4 {
                    0 => 0,
                    1 => 1,
                    2 => rng.to_le_bytes()[3] % 12,
                    _ => rng.to_le_bytes()[5],
                };
            }
            answers.push(b);
        }
        for bytes in &answers {
            let found = missing::Findings {
                not_entered: Answer::decode(bytes)
                    .filter(|a| !a.entered)
                    .map(|a| (1, a))
                    .into_iter()
                    .collect(),
                failed: Vec::new(),
            };
            let Some(m) = found.missing("all_reduce", 9) else {
                continue;
            };
            let e = crate::Error::Timeout {
                op: "all_reduce".into(),
                waiting_on: m.ranks,
                detail: m.detail,
            };
            let text = e.to_string();
            assert!(text.bytes().all(|b| (b' '..=b'~').contains(&b)), "{text:?}");
            assert!(!text.contains("rank 0"), "{text:?}");
            assert!(!text.contains("ERROR"), "{text:?}");
        }
        // The crafted ones are no answer at all.
        for c in crafted {
            assert_eq!(Answer::decode(c), None);
        }
    }

    #[test]
    fn answers_round_trip_and_garbage_never_panics() {
        let r = FlightRecord::new();
        let n = r.start(entry("scan", 1, 3, CallState::Running));
        r.end::<()>(n, &Err(crate::Error::Revoked));
        let a = asked(&r, 3, 1);
        assert_eq!(Answer::decode(&a.encode()), Some(a));
        for len in 0..40 {
            let q: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let a = answer_question(&r, 3, &q);
            let _ = Answer::decode(&a);
            let _ = Answer::decode(&q);
        }
        assert_eq!(Answer::decode(&[7; answer::ANSWER_LEN]), None);
    }
}
