//! Who is missing from a call that timed out, at a cost that grows with
//! the group, not with its square.
//!
//! Every member whose call times out wants the same facts, and asking
//! every other member each would be P·(P−1) questions for one stall. So
//! the group's rank 0 gathers them: a member asks it (`FLIGHT_SURVEY_FN`)
//! which members have not entered call `seq` or failed in it; rank 0 asks
//! each member once (`FLIGHT_FN`) and keeps what they said for a moment
//! ([`SURVEY_FRESH`]), so the other members' asking is answered from
//! that — one survey of P−1 questions per stall, P−1 questions to rank 0.
//! Each asker then asks the few members named ([`MAX_NAMED`] at most)
//! itself, and names those that say so in their own answer: rank 0 can
//! leave a member out, but cannot name one that entered.
//!
//! A survey answers for any call: each member's answer carries its last
//! call on the group, and a member whose last call is before `seq` has
//! not entered `seq`. The whole asking takes at most [`asking_time`]
//! (a second, or the deadline if shorter).

use super::answer::Answer;
use super::{decode_question, encode_question, FlightRecord, FLIGHT_FN};
use crate::group::rpc::{ask_many, Rpc};
use crate::group::GroupInner;
use meshwork_transport::Transport;
use std::time::{Duration, Instant};

/// The reserved RPC function, served by a group's rank 0, that answers
/// "which members have not entered call `seq`, or failed in it".
pub(crate) const FLIGHT_SURVEY_FN: u32 = 0xFFFF_FFF2;

/// How many members an asker names at most (and a survey lists of each
/// kind): each one named costs it a question.
const MAX_NAMED: usize = 16;

/// How long a survey's answers stand for later questions about the same
/// group.
const SURVEY_FRESH: Duration = Duration::from_secs(1);

/// The longest a survey's own questions may take, whatever an asker
/// asks for.
const SURVEY_WAIT_MAX: Duration = Duration::from_secs(1);

/// How long a timed-out call asks before it reports what it has: the
/// answers come from the members' RPC servers, a round trip or two.
fn asking_time(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(1))
}

/// What the members of group `comm` said of their last call, when.
#[derive(Debug)]
pub(crate) struct Survey {
    comm: u64,
    at: Instant,
    /// Those that answered (this rank too), with their last call here.
    lasts: Vec<(u32, Option<super::answer::CallFacts>)>,
}

/// What a survey says of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    NotEntered = 0,
    Failed = 1,
}

impl Survey {
    /// The members that have not entered call `seq`, then those whose
    /// call `seq` failed, at most [`MAX_NAMED`] of each.
    fn verdicts(&self, seq: u64) -> Vec<(u32, Verdict)> {
        let of = |verdict: Verdict| {
            self.lasts
                .iter()
                .filter(move |(_, last)| {
                    let answer = Answer {
                        entered: last.is_some_and(|l| l.seq >= seq),
                        last: *last,
                        elsewhere: None,
                    };
                    match verdict {
                        Verdict::NotEntered => !answer.entered,
                        Verdict::Failed => answer.failed_in(seq),
                    }
                })
                .map(move |&(rank, _)| (rank, verdict))
                .take(MAX_NAMED)
        };
        of(Verdict::NotEntered).chain(of(Verdict::Failed)).collect()
    }
}

fn encode_verdicts(v: &[(u32, Verdict)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 5 * v.len());
    out.push(v.len() as u8);
    for &(rank, verdict) in v {
        out.extend_from_slice(&rank.to_le_bytes());
        out.push(verdict as u8);
    }
    out
}

/// A survey's answer off the wire (any bytes): `None` unless it is
/// exactly a count of at most 2·[`MAX_NAMED`] entries, each a rank and
/// a verdict.
fn decode_verdicts(b: &[u8]) -> Option<Vec<(u32, Verdict)>> {
    let (&n, rest) = b.split_first()?;
    let n = usize::from(n);
    if n > 2 * MAX_NAMED || rest.len() != 5 * n {
        return None;
    }
    rest.chunks_exact(5)
        .map(|c| {
            let rank = u32::from_le_bytes(c[..4].try_into().ok()?);
            let verdict = match c[4] {
                0 => Verdict::NotEntered,
                1 => Verdict::Failed,
                _ => return None,
            };
            Some((rank, verdict))
        })
        .collect()
}

/// The survey of group `comm` for call `seq`, asking its members at most
/// `wait` unless a fresh one is at hand. One at a time: a second asker
/// waits for the first one's survey and takes it.
fn survey(
    t: &dyn Transport,
    comm: u64,
    rpc: &Rpc,
    seq: u64,
    wait: Duration,
) -> Vec<(u32, Verdict)> {
    let record: &FlightRecord = &rpc.flight;
    let mut held = record.survey.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = held
        .as_ref()
        .filter(|s| s.comm == comm && s.at.elapsed() < SURVEY_FRESH)
    {
        return s.verdicts(seq);
    }
    let me = t.rank();
    let others: Vec<u32> = (0..t.world()).filter(|&r| r != me).collect();
    let question = encode_question(comm, seq);
    let mut lasts = vec![(me, record.answer(comm, seq).last)];
    for (rank, answer) in ask_many(t, comm, rpc, &others, FLIGHT_FN, &question, wait) {
        match answer.ok().as_deref().and_then(Answer::decode) {
            Some(a) => lasts.push((rank, a.last)),
            None => tracing::debug!(rank, "no answer to the survey of call #{seq}"),
        }
    }
    let s = Survey {
        comm,
        at: Instant::now(),
        lasts,
    };
    let verdicts = s.verdicts(seq);
    *held = Some(s);
    verdicts
}

/// The survey question's arguments: the call, and how long the asker
/// waits for the answer (the survey's questions must be answered in
/// less).
fn encode_survey_question(comm: u64, seq: u64, wait: Duration) -> [u8; 20] {
    let mut q = [0u8; 20];
    q[..16].copy_from_slice(&encode_question(comm, seq));
    let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
    q[16..].copy_from_slice(&ms.to_le_bytes());
    q
}

/// The answer rank 0's RPC server of group `comm` gives to a survey
/// question (any bytes): about its own group only.
pub(crate) fn answer_survey(t: &dyn Transport, comm: u64, rpc: &Rpc, args: &[u8]) -> Vec<u8> {
    let (Some((asked, seq)), Some(ms)) = (
        decode_question(args),
        args.get(16..20)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes),
    ) else {
        return Vec::new();
    };
    if asked != comm || args.len() != 20 {
        return Vec::new();
    }
    let wait = Duration::from_millis(u64::from(ms)).min(SURVEY_WAIT_MAX);
    encode_verdicts(&survey(t, comm, rpc, seq, wait))
}

/// What the members named by the survey say of a call, in their own
/// answers.
pub(crate) struct Findings {
    /// Members that say they have not entered it.
    pub(crate) not_entered: Vec<(u32, Answer)>,
    /// Members that say their call of it failed.
    pub(crate) failed: Vec<(u32, Answer)>,
}

/// What a timed-out call found out: the members that never entered it
/// (with what each is doing), if any answered so.
pub(crate) struct Missing {
    pub(crate) ranks: Vec<u32>,
    pub(crate) detail: String,
}

impl Findings {
    /// `rank 2 has not entered all_reduce #3; its last call here, …`, one
    /// clause per member that has not.
    pub(crate) fn missing(&self, op: &str, seq: u64) -> Option<Missing> {
        let words: Vec<String> = self
            .not_entered
            .iter()
            .map(|(rank, a)| format!("rank {rank} has not entered {op} #{seq}; {}", a.words(seq)))
            .collect();
        (!words.is_empty()).then(|| Missing {
            ranks: self.not_entered.iter().map(|&(r, _)| r).collect(),
            detail: format!(": {}", words.join("; ")),
        })
    }
}

impl GroupInner {
    /// What the members say of call `seq`: those that have not entered
    /// it and those whose call of it failed, named by rank 0's survey and
    /// each confirmed by its own answer; within [`asking_time`].
    pub(crate) fn ask_about(&self, seq: u64) -> Findings {
        let asking = asking_time(self.timeout());
        let until = Instant::now() + asking;
        // Rank 0's survey has half the time; its answer comes within
        // three quarters; the members named, in what is left.
        let survey_wait = asking / 2;
        let named = if self.rank == 0 {
            survey(&*self.transport, self.comm_id, &self.rpc, seq, survey_wait)
        } else {
            let question = encode_survey_question(self.comm_id, seq, survey_wait);
            let got = self.rpc_many(&[0], FLIGHT_SURVEY_FN, &question, asking * 3 / 4);
            let verdicts = got
                .into_iter()
                .next()
                .and_then(|(_, a)| decode_verdicts(&a.ok()?));
            if verdicts.is_none() {
                tracing::debug!("rank 0 did not answer who entered call #{seq}");
            }
            verdicts.unwrap_or_default()
        };
        let mut ask: Vec<u32> = named
            .iter()
            .map(|&(rank, _)| rank)
            .filter(|&r| r != self.rank && r < self.world)
            .collect();
        ask.sort_unstable();
        ask.dedup();
        ask.truncate(MAX_NAMED);
        let question = encode_question(self.comm_id, seq);
        let left = until.saturating_duration_since(Instant::now());
        let mut found = Findings {
            not_entered: Vec::new(),
            failed: Vec::new(),
        };
        for (rank, answer) in self.rpc_many(&ask, FLIGHT_FN, &question, left) {
            match answer.ok().as_deref().and_then(Answer::decode) {
                Some(a) if !a.entered => found.not_entered.push((rank, a)),
                Some(a) if a.failed_in(seq) => found.failed.push((rank, a)),
                Some(_) => {}
                None => tracing::debug!(rank, "no answer about call #{seq}"),
            }
        }
        found
    }

    /// Call `seq` (`op`) timed out with no member known failed: the
    /// members that never entered it, in words. `None` if none says so
    /// (then the rank waited on is the best answer there is).
    pub(crate) fn who_is_missing(&self, op: &str, seq: u64) -> Option<Missing> {
        self.ask_about(seq).missing(op, seq)
    }
}

#[cfg(test)]
mod tests {
    use super::super::answer::{CallFacts, Stands};
    use super::*;
    use meshwork_collectives::Collective;

    fn last(seq: u64, stands: Stands) -> Option<CallFacts> {
        Some(CallFacts {
            op: Some(Collective::Broadcast),
            seq,
            stands,
            age: Duration::from_millis(4000),
        })
    }

    #[test]
    fn a_survey_names_who_has_not_entered_and_whose_call_failed() {
        let s = Survey {
            comm: 7,
            at: Instant::now(),
            lasts: vec![
                (0, last(3, Stands::Running)),
                (1, last(2, Stands::Done)),
                (2, None),
                (
                    3,
                    last(3, Stands::Failed(super::super::answer::Failure::Device)),
                ),
            ],
        };
        let v = s.verdicts(3);
        assert_eq!(
            v,
            [
                (1, Verdict::NotEntered),
                (2, Verdict::NotEntered),
                (3, Verdict::Failed)
            ]
        );
        assert_eq!(decode_verdicts(&encode_verdicts(&v)), Some(v));
        // Any other bytes are no answer.
        assert_eq!(decode_verdicts(&[]), None);
        assert_eq!(decode_verdicts(&[1, 0, 0, 0, 0, 2]), None);
        assert_eq!(decode_verdicts(&[1, 0, 0, 0, 0]), None);
        assert_eq!(decode_verdicts(&[33]), None);
    }
}
