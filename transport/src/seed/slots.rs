//! The seed's book of ranks: who holds which rank of the group forming,
//! which growth is open, and the checks a member's claim on a growth
//! passes before the seed keeps or allocates anything for it.

use super::session::Session;
use super::wire::{JoinMsg, CHALLENGE_LEN, JOIN_LEN, PROOF_LEN};
use super::{Status, GROW_MAX};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};

/// A joiner admitted by the seed, waiting for the others.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) stream: TcpStream,
    pub(super) addr: SocketAddr,
    pub(super) session: Session,
}

/// What a joiner that proved the token sent and was sent: enough to
/// answer it, now or (a new process for a running job) at the growth.
pub(super) struct Hello {
    pub(super) join: [u8; JOIN_LEN],
    pub(super) challenge: [u8; CHALLENGE_LEN],
    pub(super) proof: [u8; PROOF_LEN],
    pub(super) shared: [u8; 32],
    /// Its data address for the table.
    pub(super) addr: SocketAddr,
}

/// A new process for a running job, waiting for the members to grow it.
pub(super) struct Waiting {
    pub(super) stream: TcpStream,
    pub(super) hello: Hello,
}

/// How many new processes an elastic seed keeps waiting for a growth;
/// one more is told so (they all proved the token: none is a stranger).
pub(super) const WAITING_MAX: usize = 64;

#[derive(Debug)]
pub(super) enum Slot {
    Free,
    /// An admission has claimed this rank and is sending the welcome.
    Claimed,
    Member(Member),
}

pub(super) struct Slots {
    pub(super) ranks: Vec<Slot>,
    /// Whether ranks may still be claimed.
    pub(super) open: bool,
    /// The size of the group forming (0: none; an elastic seed between
    /// growths).
    pub(super) world: u32,
    /// Ranks from here on are for new processes, in arrival order (a
    /// growth's; the world when none is growing).
    pub(super) joiners_from: u32,
    /// Which group this is, the one forming or (between growths) the last
    /// one opened: the job's first formation 0, each growth the next.
    /// The members' secrets are its (`member_secret`).
    pub(super) generation: u64,
    /// The group the seed formed last, once the job has formed.
    pub(super) running: Option<Running>,
    /// The growth forming: which membership (a rank of the running group)
    /// claimed which of its ranks. One rank per membership.
    pub(super) claimed_by: HashMap<u32, u32>,
    /// New processes for the running job, in arrival order.
    pub(super) waiting: VecDeque<Waiting>,
}

/// The group an elastic seed formed last, whose members may grow it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Running {
    pub(super) world: u32,
    pub(super) generation: u64,
}

/// A joiner's claim on a rank.
pub(super) enum Claim {
    /// The rank, in the group of this world and generation.
    Rank {
        rank: u32,
        world: u32,
        generation: u64,
    },
    /// The verdict, the rank in question and the world.
    Refused(Status, u32, u32),
    /// A new process for a running job: answered at the next growth.
    Wait,
}

impl Slots {
    /// A member's claim on its own rank in a growth of the `running`
    /// group: `member`, the membership it proved (`None`: none, or one
    /// that did not prove). The first claim opens the growth; the others
    /// must ask for the same. Every number is checked before anything is
    /// kept or allocated for it.
    pub(super) fn claim_member(
        &mut self,
        join: &JoinMsg,
        member: Option<u32>,
        running: Running,
    ) -> Claim {
        let Some(member) = member.filter(|m| !self.claimed_by.contains_key(m)) else {
            return Claim::Refused(Status::NotMember, join.want, self.world);
        };
        // A growth keeps at most the running group's members (fewer once
        // it shrank) and adds between 1 and GROW_MAX new processes.
        let members = join.world.checked_sub(join.grow);
        let fits = |m: u32| m > 0 && m <= running.world;
        let Some(joiners_from) =
            members.filter(|&m| fits(m) && (1..=GROW_MAX).contains(&join.grow))
        else {
            let world = if self.world == 0 {
                running.world
            } else {
                self.world
            };
            return Claim::Refused(Status::World, 0, world);
        };
        if join.want >= joiners_from {
            // A member asks for a new process's rank: refused before it
            // could open a growth nobody else would join.
            return Claim::Refused(Status::RankConflict, join.want, self.world);
        }
        if self.world == 0 {
            // At most running.world + GROW_MAX slots: both checked above.
            self.ranks = (0..join.world).map(|_| Slot::Free).collect();
            self.world = join.world;
            self.joiners_from = joiners_from;
            self.generation += 1;
            self.open = true;
            tracing::info!(world = join.world, joiners = join.grow, "a growth begins");
        } else if join.world != self.world || joiners_from != self.joiners_from {
            return Claim::Refused(Status::World, 0, self.world);
        }
        let want = join.want;
        let free = matches!(self.ranks.get(want as usize), Some(Slot::Free));
        if !self.open || want >= joiners_from || !free {
            return Claim::Refused(Status::RankConflict, want, self.world);
        }
        self.ranks[want as usize] = Slot::Claimed;
        self.claimed_by.insert(member, want);
        Claim::Rank {
            rank: want,
            world: self.world,
            generation: self.generation,
        }
    }

    /// Between growths: no group forming.
    pub(super) fn idle(&mut self) {
        self.ranks.clear();
        self.world = 0;
        self.joiners_from = 0;
        self.open = false;
        self.claimed_by.clear();
    }
}
