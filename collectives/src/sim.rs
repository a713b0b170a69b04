//! A deterministic simulated world for testing algorithms without threads
//! racing, sockets or clocks.
//!
//! Every rank runs the algorithm on its own thread, but only one thread runs
//! at a time: at each `send` and `recv` the running rank hands the turn to a
//! rank chosen by a seeded generator among those that can make progress, so
//! one seed is one reproducible interleaving. Messages carry a virtual
//! delivery time (`now + link_delay(from, to)`); when every live rank waits
//! for an undelivered message, virtual time jumps to the next delivery.
//!
//! Faults: a rank can crash after `k` messages (its peers see
//! [`SimError::PeerDead`], as a reset connection), or freeze (nothing is
//! known dead, so its peers end in [`SimError::Deadlock`], the simulated
//! deadline). A step budget bounds the whole run: a broken algorithm fails
//! with [`SimError::StepBudget`] instead of hanging the test.

use crate::comm::Comm;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Why a simulated operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// Every live rank was waiting and no message was on its way: the
    /// simulated equivalent of a deadline expiring. Names the awaited peer.
    Deadlock {
        /// The peer this rank was waiting for.
        waiting_on: usize,
    },
    /// The awaited peer crashed and left nothing more in flight.
    PeerDead {
        /// The crashed peer.
        rank: usize,
    },
    /// This rank was the one crashed by the fault plan.
    Crashed,
    /// This rank was frozen by the fault plan.
    Frozen,
    /// The run exceeded [`SimConfig::step_budget`] operations.
    StepBudget,
    /// A message of the wrong length arrived.
    Length {
        /// The sender.
        from: usize,
        /// The length the receive asked for, in bytes.
        expected: usize,
        /// The length that arrived, in bytes.
        got: usize,
    },
}

/// A fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `rank` crashes when it tries to send message number `after + 1`.
    Crash {
        /// The rank that crashes.
        rank: usize,
        /// How many messages it sends first.
        after: usize,
    },
    /// `rank` stops forever when it tries to send message number `after + 1`.
    Freeze {
        /// The rank that freezes.
        rank: usize,
        /// How many messages it sends first.
        after: usize,
    },
}

/// How a simulated run behaves.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// Seeds the interleaving.
    pub seed: u64,
    /// Virtual time a message spends on the link `from → to`.
    pub link_delay: fn(usize, usize) -> u64,
    /// At most one injected fault.
    pub fault: Option<Fault>,
    /// Operations (sends + receives, all ranks) before the run is failed.
    pub step_budget: usize,
    /// The fanout the ranks report to the tree algorithms (0: the
    /// default, `P − 1`).
    pub fanout: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            link_delay: |_, _| 1,
            fault: None,
            step_budget: 1_000_000,
            fanout: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Runnable,
    Blocked { from: usize },
    Frozen,
    Done,
}

#[derive(Debug)]
struct State {
    p: usize,
    now: u64,
    turn: Option<usize>,
    status: Vec<Status>,
    /// `queues[from * p + to]`: (delivery time, bytes), FIFO.
    queues: Vec<VecDeque<(u64, Vec<u8>)>>,
    crashed: Vec<bool>,
    sent: Vec<usize>,
    steps: usize,
    rng: u64,
    wake_error: Vec<Option<SimError>>,
}

impl State {
    fn next_random(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn can_run(&self, r: usize) -> bool {
        match self.status[r] {
            Status::Runnable => true,
            Status::Blocked { from } => {
                let q = &self.queues[from * self.p + r];
                q.front().is_some_and(|(t, _)| *t <= self.now)
                    || (q.is_empty() && self.crashed[from])
            }
            Status::Frozen | Status::Done => false,
        }
    }

    /// Choose who runs next, advancing virtual time or breaking a deadlock
    /// as needed; `None` when every rank is done or frozen.
    fn pick_next(&mut self) -> Option<usize> {
        loop {
            let ready: Vec<usize> = (0..self.p).filter(|&r| self.can_run(r)).collect();
            if !ready.is_empty() {
                let i = (self.next_random() % ready.len() as u64) as usize;
                return Some(ready[i]);
            }
            let next_delivery = (0..self.p)
                .filter_map(|r| match self.status[r] {
                    Status::Blocked { from } => {
                        self.queues[from * self.p + r].front().map(|(t, _)| *t)
                    }
                    _ => None,
                })
                .min();
            if let Some(t) = next_delivery {
                self.now = t;
                continue;
            }
            let mut any = false;
            for r in 0..self.p {
                if let Status::Blocked { from } = self.status[r] {
                    self.wake_error[r] = Some(if self.over_budget() {
                        SimError::StepBudget
                    } else {
                        SimError::Deadlock { waiting_on: from }
                    });
                    self.status[r] = Status::Runnable;
                    any = true;
                }
            }
            if !any {
                // Everyone left is frozen: release them so the driver ends.
                for r in 0..self.p {
                    if self.status[r] == Status::Frozen {
                        self.wake_error[r] = Some(SimError::Frozen);
                        self.status[r] = Status::Runnable;
                        any = true;
                    }
                }
                if !any {
                    return None;
                }
            }
        }
    }

    fn over_budget(&self) -> bool {
        self.steps == usize::MAX
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    turn_changed: Condvar,
    config: SimConfig,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Give the turn away (possibly to `me` again) and wait until it comes
    /// back. Returns the error to report if `me` was woken by a failure.
    fn yield_turn<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        me: usize,
    ) -> (MutexGuard<'a, State>, Option<SimError>) {
        st.turn = st.pick_next();
        self.turn_changed.notify_all();
        while st.turn != Some(me) {
            st = self
                .turn_changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
        let err = st.wake_error[me].take();
        st.status[me] = Status::Runnable;
        (st, err)
    }

    /// Count one operation; past the budget every operation fails.
    fn step(&self, st: &mut State) -> Result<(), SimError> {
        if st.over_budget() {
            return Err(SimError::StepBudget);
        }
        st.steps += 1;
        if st.steps > self.config.step_budget {
            st.steps = usize::MAX;
            return Err(SimError::StepBudget);
        }
        Ok(())
    }
}

/// One rank's view of the simulated world; implements [`Comm`].
#[derive(Debug)]
pub struct SimComm<'a> {
    rank: usize,
    size: usize,
    shared: &'a Shared,
}

impl Comm for SimComm<'_> {
    type Error = SimError;
    type Buf = Vec<u8>;

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn fanout(&self) -> usize {
        match self.shared.config.fanout {
            0 => self.size.saturating_sub(1).max(1),
            k => k,
        }
    }

    fn send(&mut self, to: usize, data: &[u8]) -> Result<(), SimError> {
        let me = self.rank;
        let mut st = self.shared.lock();
        self.shared.step(&mut st)?;
        match self.shared.config.fault {
            Some(Fault::Crash { rank, after }) if rank == me && st.sent[me] == after => {
                st.crashed[me] = true;
                return Err(SimError::Crashed);
            }
            Some(Fault::Freeze { rank, after }) if rank == me && st.sent[me] == after => {
                st.status[me] = Status::Frozen;
                let (_st, err) = self.shared.yield_turn(st, me);
                return Err(err.unwrap_or(SimError::Frozen));
            }
            _ => {}
        }
        st.sent[me] += 1;
        let at = st.now + (self.shared.config.link_delay)(me, to);
        let p = st.p;
        st.queues[me * p + to].push_back((at, data.to_vec()));
        let (_st, err) = self.shared.yield_turn(st, me);
        err.map_or(Ok(()), Err)
    }

    fn recv(&mut self, from: usize, len: usize) -> Result<Vec<u8>, SimError> {
        let me = self.rank;
        let mut st = self.shared.lock();
        self.shared.step(&mut st)?;
        loop {
            let (now, p) = (st.now, st.p);
            let q = &mut st.queues[from * p + me];
            if q.front().is_some_and(|(t, _)| *t <= now) {
                let (_, bytes) = q.pop_front().unwrap_or_default();
                if bytes.len() != len {
                    return Err(SimError::Length {
                        from,
                        expected: len,
                        got: bytes.len(),
                    });
                }
                return Ok(bytes);
            }
            if q.is_empty() && st.crashed[from] {
                return Err(SimError::PeerDead { rank: from });
            }
            st.status[me] = Status::Blocked { from };
            let (next, err) = self.shared.yield_turn(st, me);
            st = next;
            if let Some(e) = err {
                return Err(e);
            }
        }
    }
}

/// Run `f` on `p` simulated ranks under `config`; returns each rank's result
/// in rank order. Never hangs: a stuck run ends in `Deadlock` or
/// `StepBudget` errors.
pub fn run<R: Send>(
    p: usize,
    config: SimConfig,
    f: impl Fn(&mut SimComm<'_>) -> Result<R, SimError> + Sync,
) -> Vec<Result<R, SimError>> {
    let shared = Shared {
        state: Mutex::new(State {
            p,
            now: 0,
            turn: None,
            status: vec![Status::Runnable; p],
            queues: (0..p * p).map(|_| VecDeque::new()).collect(),
            crashed: vec![false; p],
            sent: vec![0; p],
            steps: 0,
            rng: config.seed,
            wake_error: vec![None; p],
        }),
        turn_changed: Condvar::new(),
        config,
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..p)
            .map(|rank| {
                let shared = &shared;
                let f = &f;
                s.spawn(move || {
                    let mut st = shared.lock();
                    while st.turn != Some(rank) {
                        st = shared
                            .turn_changed
                            .wait(st)
                            .unwrap_or_else(|e| e.into_inner());
                    }
                    drop(st);
                    // A panicking rank must still pass the turn on, or the
                    // others would wait for it forever.
                    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        f(&mut SimComm {
                            rank,
                            size: p,
                            shared,
                        })
                    }));
                    let mut st = shared.lock();
                    st.status[rank] = Status::Done;
                    st.crashed[rank] = true;
                    st.turn = st.pick_next();
                    shared.turn_changed.notify_all();
                    drop(st);
                    out.unwrap_or_else(|e| std::panic::resume_unwind(e))
                })
            })
            .collect();
        {
            let mut st = shared.lock();
            st.turn = st.pick_next();
            shared.turn_changed.notify_all();
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
