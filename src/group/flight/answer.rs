//! A member's answer to "what do you know of call `seq` of this group":
//! facts, never words.
//!
//! The asker writes the words itself (`Answer::words`), from a fixed
//! table of operation names, numbers and its own phrases, so nothing a
//! member sends reaches an error's text, a log or a flight dump as it
//! was sent: a hostile member cannot put a line break, a terminal escape
//! or a made-up "rank 0 has not entered …" there. The answer speaks of
//! the group asked about only; of the process's other groups it says at
//! most that one of their calls is under way, which operation and for how
//! long — not which group, nor who is in it.
//!
//! On the wire (`ANSWER_LEN` bytes, little-endian; anything else is no
//! answer):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | entered the call asked about (0, 1) |
//! | 1 | a last call on this group follows (0, 1) |
//! | 2 | its operation (`Collective::id`; 255: none known) |
//! | 3 | how it stands: 0 running, 1 done, 2 failed |
//! | 4 | how it failed ([`Failure`]; 0 unless failed) |
//! | 5..13 | its sequence number |
//! | 13..21 | ms since it started (running) or ended |
//! | 21 | a call of another group is under way (0, 1) |
//! | 22 | its operation (as byte 2) |
//! | 23..31 | ms since it started |

use super::{secs, CallState, FlightEntry};
use crate::error::Error;
use meshwork_collectives::Collective;
use std::time::{Duration, Instant};

/// The length of an answer on the wire.
pub(crate) const ANSWER_LEN: usize = 31;

/// Which kind of error a recorded call failed with: its class, not its
/// text (the text may hold what a member sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Failure {
    #[default]
    Other,
    Timeout,
    Disconnected,
    Revoked,
    Mismatch,
    Device,
    Shrunk,
}

impl Failure {
    const ALL: [Failure; 7] = [
        Failure::Other,
        Failure::Timeout,
        Failure::Disconnected,
        Failure::Revoked,
        Failure::Mismatch,
        Failure::Device,
        Failure::Shrunk,
    ];

    pub(crate) fn of(e: &Error) -> Failure {
        match e {
            Error::Timeout { .. } => Failure::Timeout,
            Error::PeerDisconnected { .. } => Failure::Disconnected,
            Error::Revoked => Failure::Revoked,
            Error::CollectiveMismatch { .. } => Failure::Mismatch,
            Error::DeviceFailed { .. } | Error::DeviceUnavailable { .. } => Failure::Device,
            Error::GroupShrunk { .. } => Failure::Shrunk,
            _ => Failure::Other,
        }
    }

    fn id(self) -> u8 {
        Failure::ALL.iter().position(|&f| f == self).unwrap_or(0) as u8
    }

    fn from_id(id: u8) -> Option<Failure> {
        Failure::ALL.get(usize::from(id)).copied()
    }

    fn words(self) -> &'static str {
        match self {
            Failure::Other => "an error",
            Failure::Timeout => "a timeout",
            Failure::Disconnected => "a rank disconnected",
            Failure::Revoked => "the group revoked",
            Failure::Mismatch => "a collective mismatch",
            Failure::Device => "a device failure",
            Failure::Shrunk => "the group shrank",
        }
    }
}

/// How a call an answer speaks of stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stands {
    Running,
    Done,
    Failed(Failure),
}

/// One call, as an answer tells of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallFacts {
    /// `None`: an operation this build does not name.
    pub(crate) op: Option<Collective>,
    pub(crate) seq: u64,
    pub(crate) stands: Stands,
    /// Since it started (running) or ended.
    pub(crate) age: Duration,
}

impl CallFacts {
    pub(crate) fn of(e: &FlightEntry, now: Instant) -> CallFacts {
        let since = |t: Instant| now.saturating_duration_since(t);
        let (stands, age) = match (&e.state, e.ended) {
            (CallState::Done, Some(end)) => (Stands::Done, since(end)),
            (CallState::Failed(_), Some(end)) => (Stands::Failed(e.failure), since(end)),
            _ => (Stands::Running, since(e.started)),
        };
        CallFacts {
            op: op_of(e.op),
            seq: e.seq,
            stands,
            age,
        }
    }

    /// `all_reduce #3`.
    fn named(&self) -> String {
        format!("{} #{}", op_name(self.op), self.seq)
    }
}

/// The collective named `name` (a flight entry's `op`).
pub(crate) fn op_of(name: &str) -> Option<Collective> {
    Collective::ALL.into_iter().find(|c| c.name() == name)
}

fn op_name(op: Option<Collective>) -> &'static str {
    op.map_or("a collective", Collective::name)
}

/// A member's answer about one call of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    /// It entered the call asked about.
    pub(crate) entered: bool,
    /// Its last call on this group.
    pub(crate) last: Option<CallFacts>,
    /// A call of another group of its process under way: which
    /// operation, and for how long.
    pub(crate) elsewhere: Option<(Option<Collective>, Duration)>,
}

fn ms(d: Duration) -> [u8; 8] {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .to_le_bytes()
}

fn op_id(op: Option<Collective>) -> u8 {
    op.map_or(u8::MAX, Collective::id)
}

/// An operation id off the wire: a collective, none known (255), or not
/// an answer.
fn op_from(id: u8) -> Option<Option<Collective>> {
    match id {
        u8::MAX => Some(None),
        id => Collective::from_id(id).map(Some),
    }
}

fn flag(b: u8) -> Option<bool> {
    match b {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl Answer {
    /// The answer on the wire (see the module docs).
    pub(crate) fn encode(&self) -> [u8; ANSWER_LEN] {
        let mut out = [0u8; ANSWER_LEN];
        out[0] = u8::from(self.entered);
        if let Some(last) = &self.last {
            out[1] = 1;
            out[2] = op_id(last.op);
            (out[3], out[4]) = match last.stands {
                Stands::Running => (0, 0),
                Stands::Done => (1, 0),
                Stands::Failed(f) => (2, f.id()),
            };
            out[5..13].copy_from_slice(&last.seq.to_le_bytes());
            out[13..21].copy_from_slice(&ms(last.age));
        }
        if let Some((op, age)) = self.elsewhere {
            out[21] = 1;
            out[22] = op_id(op);
            out[23..31].copy_from_slice(&ms(age));
        }
        out
    }

    /// An answer off the wire: exactly [`ANSWER_LEN`] bytes, every field
    /// one the encoder writes; `None` otherwise (a fuzzed pure function).
    pub(crate) fn decode(b: &[u8]) -> Option<Answer> {
        if b.len() != ANSWER_LEN {
            return None;
        }
        let entered = flag(b[0])?;
        let last = match flag(b[1])? {
            false => None,
            true => Some(CallFacts {
                op: op_from(b[2])?,
                stands: match (b[3], b[4]) {
                    (0, 0) => Stands::Running,
                    (1, 0) => Stands::Done,
                    (2, f) => Stands::Failed(Failure::from_id(f)?),
                    _ => return None,
                },
                seq: u64_at(b, 5)?,
                age: Duration::from_millis(u64_at(b, 13)?),
            }),
        };
        let elsewhere = match flag(b[21])? {
            false => None,
            true => Some((op_from(b[22])?, Duration::from_millis(u64_at(b, 23)?))),
        };
        Some(Answer {
            entered,
            last,
            elsewhere,
        })
    }

    /// Whether its own call `seq` failed (it entered it, and it failed).
    pub(crate) fn failed_in(&self, seq: u64) -> bool {
        self.last
            .is_some_and(|l| l.seq == seq && matches!(l.stands, Stands::Failed(_)))
    }

    /// What it says of call `seq`, in this rank's words: `its last call
    /// here, broadcast #2, ended 4.0 s ago; it is in no call now`.
    pub(crate) fn words(&self, seq: u64) -> String {
        let mut words = match &self.last {
            Some(l) if l.seq == seq => match l.stands {
                Stands::Failed(f) => {
                    format!(
                        "its {} failed {} ago ({})",
                        l.named(),
                        secs(l.age),
                        f.words()
                    )
                }
                Stands::Done => format!("it ended {} {} ago", l.named(), secs(l.age)),
                Stands::Running => format!("it is in {} too, for {}", l.named(), secs(l.age)),
            },
            Some(l) => match l.stands {
                Stands::Running => format!(
                    "its last call here, {}, is running for {}",
                    l.named(),
                    secs(l.age)
                ),
                Stands::Done => {
                    format!(
                        "its last call here, {}, ended {} ago",
                        l.named(),
                        secs(l.age)
                    )
                }
                Stands::Failed(f) => format!(
                    "its last call here, {}, failed {} ago ({})",
                    l.named(),
                    secs(l.age),
                    f.words()
                ),
            },
            None => "it has made no call here yet".to_string(),
        };
        if let Some((op, age)) = self.elsewhere {
            words += &format!(
                "; it is in {} of another group for {}",
                op_name(op),
                secs(age)
            );
        } else if !self
            .last
            .is_some_and(|l| l.seq == seq || l.stands == Stands::Running)
        {
            words += "; it is in no call now";
        }
        words
    }
}
