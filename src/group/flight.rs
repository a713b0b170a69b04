//! The flight record: what a group's collectives did, and who is missing
//! when one hangs.
//!
//! Every group keeps its last [`FLIGHT_RECORD_LEN`] collective calls —
//! operation, sequence number, bytes, element type, members, start and end
//! times, outcome — in a ring written under one short lock at the start
//! and the end of each call (nothing per message), so it stays on.
//!
//! When a call times out with no member known failed, the rank asks every
//! other member, through the group's RPC server (its own threads, so a
//! member stuck in its own computation still answers), what it knows of
//! that call: whether it entered it, and what it did last and does now.
//! The timeout then names the members that never entered the call — not
//! a neighbour that waits itself — and says what each is doing:
//!
//! ```text
//! all_reduce timed out waiting on ranks [2]: rank 2 has not entered all_reduce #3;
//! its last call here, broadcast #2, ended 4.0 s ago; it is in no call now
//! ```

mod dump;

use super::GroupInner;
use crate::error::Result;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Calls a group's flight record keeps.
pub const FLIGHT_RECORD_LEN: usize = 1024;

/// The reserved RPC function that answers "what do you know of call
/// `seq` on communicator `comm`" from the flight record.
pub(crate) const FLIGHT_FN: u32 = 0xFFFF_FFF1;

/// The longest answer a member may give (a hostile one cannot make the
/// asker hold more).
const ANSWER_MAX: usize = 1024;

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
                Err(err) => CallState::Failed(err.to_string()),
            };
        }
    }

    /// The recorded calls, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<FlightEntry> {
        self.lock().entries.iter().cloned().collect()
    }

    /// The answer to "what do you know of call `seq` on `comm`": whether
    /// this rank entered it (a byte), then what it did last on `comm` and
    /// does now anywhere in this process, in words.
    pub(crate) fn answer(&self, comm: u64, seq: u64) -> Vec<u8> {
        let (entered, last) = {
            let ring = self.lock();
            let mut here = ring.entries.iter().filter(|e| e.comm == comm);
            let entered = here.clone().any(|e| e.seq >= seq);
            (entered, here.next_back().cloned())
        };
        let mut words = match &last {
            Some(e) if e.seq == seq => match (&e.state, e.ended) {
                (CallState::Failed(why), Some(end)) => format!(
                    "its {} #{} failed {} ago ({why})",
                    e.op,
                    e.seq,
                    secs(end.elapsed())
                ),
                (CallState::Done, Some(end)) => {
                    format!("it ended {} #{} {} ago", e.op, e.seq, secs(end.elapsed()))
                }
                _ => format!(
                    "it is in {} #{} too ({}, {} bytes)",
                    e.op, e.seq, e.dtype, e.bytes
                ),
            },
            Some(e) => match (&e.state, e.ended) {
                (CallState::Running, _) | (_, None) => format!(
                    "its last call here, {} #{}, is running for {}",
                    e.op,
                    e.seq,
                    secs(e.started.elapsed())
                ),
                (CallState::Done, Some(end)) => format!(
                    "its last call here, {} #{}, ended {} ago",
                    e.op,
                    e.seq,
                    secs(end.elapsed())
                ),
                (CallState::Failed(why), Some(end)) => format!(
                    "its last call here, {} #{}, failed {} ago ({why})",
                    e.op,
                    e.seq,
                    secs(end.elapsed())
                ),
            },
            None => "it has made no call here yet".to_string(),
        };
        // Calls under way in its other groups (a barrier of a sub-group
        // that holds it up, say).
        let elsewhere: Vec<String> = ALL
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .flat_map(|r| r.snapshot())
            .filter(|e| e.comm != comm && e.state == CallState::Running)
            .map(|e| {
                format!(
                    "{} #{} of another group for {}",
                    e.op,
                    e.seq,
                    secs(e.started.elapsed())
                )
            })
            .collect();
        if !elsewhere.is_empty() {
            words += &format!("; it is in {}", elsewhere.join(", "));
        } else if !matches!(&last, Some(e) if e.seq == seq || e.state == CallState::Running) {
            words += "; it is in no call now";
        }
        let mut out = vec![u8::from(entered)];
        out.extend_from_slice(words.as_bytes());
        out.truncate(ANSWER_MAX);
        out
    }
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

/// A member's answer: whether it entered the call, and its words.
fn decode_answer(bytes: &[u8]) -> Option<(bool, String)> {
    let (&entered, words) = bytes.split_first()?;
    if entered > 1 {
        return None;
    }
    let words = String::from_utf8_lossy(&words[..words.len().min(ANSWER_MAX)]).into_owned();
    Some((entered == 1, words))
}

/// The request's arguments: the communicator and the sequence number.
fn encode_question(comm: u64, seq: u64) -> [u8; 16] {
    let mut q = [0u8; 16];
    q[..8].copy_from_slice(&comm.to_le_bytes());
    q[8..].copy_from_slice(&seq.to_le_bytes());
    q
}

/// The answer a rank's RPC server gives to `args` (fuzzed: any bytes).
pub(crate) fn answer_question(record: &FlightRecord, args: &[u8]) -> Vec<u8> {
    match (args.get(..8), args.get(8..16)) {
        (Some(c), Some(s)) => {
            let comm = u64::from_le_bytes(c.try_into().unwrap_or_default());
            let seq = u64::from_le_bytes(s.try_into().unwrap_or_default());
            record.answer(comm, seq)
        }
        _ => Vec::new(),
    }
}

/// How long a timed-out call asks the others before it reports what it
/// has: the answers come from their RPC servers, a round trip each, all
/// at once.
fn asking_time(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(1))
}

/// What a timed-out call found out: the members that never entered it
/// (with what each is doing), if any answered so.
pub(crate) struct Missing {
    pub(crate) ranks: Vec<u32>,
    pub(crate) detail: String,
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
        })
    }

    /// Every other member's answer about call `seq`: whether it entered
    /// it and what it says, `None` where no answer came in time.
    pub(crate) fn ask_about(&self, seq: u64) -> Vec<(u32, Option<(bool, String)>)> {
        let others: Vec<u32> = (0..self.world).filter(|&r| r != self.rank).collect();
        let question = encode_question(self.comm_id, seq);
        self.rpc_many(&others, FLIGHT_FN, &question, asking_time(self.timeout()))
            .into_iter()
            .map(|(rank, answer)| (rank, answer.as_deref().ok().and_then(decode_answer)))
            .collect()
    }

    /// Call `seq` (`op`) timed out with no member known failed: ask every
    /// other member what it knows of it. `None` if none says it never
    /// entered it (then the rank waited on is the best answer there is).
    pub(crate) fn who_is_missing(&self, op: &str, seq: u64) -> Option<Missing> {
        let mut ranks = Vec::new();
        let mut words = Vec::new();
        for (rank, answer) in self.ask_about(seq) {
            match answer {
                Some((false, what)) => {
                    ranks.push(rank);
                    words.push(format!("rank {rank} has not entered {op} #{seq}; {what}"));
                }
                Some((true, _)) => {}
                None => tracing::debug!(rank, "no answer about {op} #{seq}"),
            }
        }
        (!ranks.is_empty()).then(|| Missing {
            ranks,
            detail: format!(": {}", words.join("; ")),
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
        }
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
        let (entered, words) = decode_answer(&r.answer(7, 3)).unwrap();
        assert!(!entered);
        assert!(
            words.starts_with("its last call here, broadcast #2, ended"),
            "{words}"
        );
        assert!(words.ends_with("it is in no call now"), "{words}");
        r.start(entry("all_reduce", 3, 7, CallState::Running));
        let (entered, words) = decode_answer(&r.answer(7, 3)).unwrap();
        assert!(entered);
        assert_eq!(words, "it is in all_reduce #3 too (f32, 16 bytes)");
        // Ended: how, and how long ago.
        let n = r.start(entry("all_gather", 4, 7, CallState::Running));
        r.end::<()>(
            n,
            &Err(crate::Error::DeviceFailed {
                op: "all_gather".into(),
                what: "an illegal address".into(),
            }),
        );
        let (entered, words) = decode_answer(&r.answer(7, 4)).unwrap();
        assert!(entered);
        assert!(
            words.starts_with("its all_gather #4 failed") && words.contains("an illegal address"),
            "{words}"
        );
        // Nothing on another communicator.
        let (entered, words) = decode_answer(&r.answer(8, 0)).unwrap();
        assert!(!entered);
        assert!(words.contains("no call here yet"), "{words}");
    }

    #[test]
    fn garbage_questions_and_answers_never_panic() {
        let r = FlightRecord::new();
        for len in 0..40 {
            let q: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let a = answer_question(&r, &q);
            let _ = decode_answer(&a);
            let _ = decode_answer(&q);
        }
        assert_eq!(decode_answer(&[7, b'x']), None);
    }
}
