//! The listening side of formation: every accepted connection is
//! handshaken on its own short-lived thread under one deadline, so a
//! stranger who is silent, dribbles bytes or fails the proof holds up
//! nobody but itself. Handshakes in flight are bounded per source address
//! and in all; a newcomer over a bound evicts the oldest handshake it
//! competes with (a stranger flooding connections only evicts its own,
//! while an honest peer's handshake, done in a round trip, is rarely the
//! oldest).

use crate::auth::handshake::{self, Admitted, HandshakeError, Identity};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Handshakes in flight from one source address.
pub(crate) const PENDING_PER_SOURCE: usize = 8;
/// Handshakes in flight in all.
pub(crate) const PENDING_TOTAL: usize = 64;

/// The handshakes under way, oldest first: a clone of each one's socket
/// (to cut it when evicted) by a serial number. Formation's gate and the
/// seed's admissions each keep one.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    next: u64,
    list: std::collections::VecDeque<(u64, IpAddr, TcpStream)>,
}

impl InFlight {
    /// Make room for a handshake from `ip` (which may have `room` under
    /// way at once), evicting the oldest over a bound, and count it in;
    /// its serial number.
    pub(crate) fn admit(
        &mut self,
        ip: IpAddr,
        room: usize,
        stream: &TcpStream,
    ) -> std::io::Result<u64> {
        let from_ip = self.list.iter().filter(|(_, i, _)| *i == ip).count();
        let evict = if from_ip >= room {
            self.list.iter().position(|(_, i, _)| *i == ip)
        } else if self.list.len() >= PENDING_TOTAL {
            Some(0)
        } else {
            None
        };
        if let Some((_, old, s)) = evict.and_then(|at| self.list.remove(at)) {
            tracing::warn!(from = %old, "cut a handshake short: too many under way");
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let id = self.next;
        self.next += 1;
        self.list.push_back((id, ip, stream.try_clone()?));
        Ok(id)
    }

    /// Count handshake `id` out; whether it was still counted (not
    /// evicted, its socket not cut).
    pub(crate) fn done(&mut self, id: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|(i, ..)| *i != id);
        self.list.len() < before
    }

    /// Cut every handshake under way.
    pub(crate) fn cut_all(&mut self) {
        for (_, _, s) in self.list.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// One handshake's deadline: about a second, less under a shorter
/// formation timeout. An honest peer answers in microseconds; a dialer
/// whose handshake was cut short simply dials again.
pub(crate) fn handshake_time(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// What one accepted connection's handshake came to.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub from: SocketAddr,
    pub result: Result<(TcpStream, Admitted), (Option<u32>, HandshakeError)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connections taken off a listener in one turn, at most: a flood of
/// them does not keep formation (or the seed) from its deadline and its
/// other work.
const ACCEPT_PER_TURN: usize = 64;

/// Accepted connections, each handshaken on a thread of its own, bounded
/// as [`InFlight`] says until the peer proves the token. Formation's gate
/// and the seed's admissions each keep one; dropping it cuts the
/// handshakes of strangers and waits for every thread.
#[derive(Debug)]
pub(crate) struct Doorway {
    in_flight: Arc<Mutex<InFlight>>,
    threads: Vec<JoinHandle<()>>,
    time: Duration,
}

/// What a handshake thread holds: its deadline, and its place among the
/// handshakes under way (given up when it ends).
#[derive(Debug)]
pub(crate) struct Pass {
    in_flight: Arc<Mutex<InFlight>>,
    serial: u64,
    pub(crate) deadline: Instant,
}

impl Pass {
    /// The peer proved the token: it stops counting as a stranger, and no
    /// newcomer can evict it. `false`: it was evicted already (its socket
    /// is cut).
    pub(crate) fn proved(&self) -> bool {
        lock(&self.in_flight).done(self.serial)
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        lock(&self.in_flight).done(self.serial);
    }
}

/// A handshake thread's body: the connection, its source and its pass.
pub(crate) type Handshake = Arc<dyn Fn(TcpStream, SocketAddr, Pass) + Send + Sync>;

impl Doorway {
    /// Handshakes of `time` each (see [`handshake_time`]).
    pub(crate) fn new(time: Duration) -> Doorway {
        Doorway {
            in_flight: Arc::default(),
            threads: Vec::new(),
            time,
        }
    }

    /// Each handshake's time.
    pub(crate) fn time(&self) -> Duration {
        self.time
    }

    /// Take the pending connections off `listener` (up to
    /// [`ACCEPT_PER_TURN`]) and run `run` for each on a thread named
    /// `name`; `room(ip)`: how many handshakes `ip` may have under way.
    /// `true`: more may wait (an edge-triggered listener must be called
    /// again without waiting for an event).
    pub(crate) fn accept_ready(
        &mut self,
        listener: &TcpListener,
        name: &str,
        room: impl Fn(IpAddr) -> usize,
        run: &Handshake,
    ) -> bool {
        self.threads.retain(|t| !t.is_finished());
        for _ in 0..ACCEPT_PER_TURN {
            let (stream, from) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    return false;
                }
            };
            let ip = from.ip().to_canonical();
            let serial = match lock(&self.in_flight).admit(ip, room(ip), &stream) {
                Ok(serial) => serial,
                Err(e) => {
                    tracing::warn!(%from, "cannot track a handshake: {e}");
                    continue;
                }
            };
            let pass = Pass {
                in_flight: Arc::clone(&self.in_flight),
                serial,
                deadline: Instant::now() + self.time,
            };
            let run = Arc::clone(run);
            // A thread that cannot start drops its pass with the closure.
            match std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(stream, from, pass))
            {
                Ok(t) => self.threads.push(t),
                Err(e) => tracing::warn!(%from, "cannot start a handshake thread: {e}"),
            }
        }
        true
    }
}

impl Drop for Doorway {
    fn drop(&mut self) {
        lock(&self.in_flight).cut_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The listener and the handshakes it has under way.
#[derive(Debug)]
pub(crate) struct Gate {
    listener: TcpListener,
    id: Identity,
    /// The ranks this side accepts links from (after formation, a
    /// tree's orphans re-attaching: `Gate::expecting`).
    expect: Arc<Mutex<BTreeSet<u32>>>,
    /// The ranks admitted or being admitted.
    claimed: Arc<Mutex<BTreeSet<u32>>>,
    /// Handshakes from each address of an expected peer allowed beyond
    /// `PENDING_PER_SOURCE` (one per peer there).
    room: HashMap<IpAddr, usize>,
    doorway: Doorway,
}

impl Gate {
    /// A gate admitting the ranks in `expect`, whose addresses (as far
    /// as known) are `addresses`.
    pub(crate) fn new(
        listener: TcpListener,
        id: Identity,
        expect: BTreeSet<u32>,
        addresses: impl IntoIterator<Item = IpAddr>,
        timeout: Duration,
    ) -> Gate {
        let mut room = HashMap::new();
        for ip in addresses {
            *room.entry(ip.to_canonical()).or_insert(0) += 1;
        }
        Gate {
            room,
            listener,
            id,
            expect: Arc::new(Mutex::new(expect)),
            claimed: Arc::default(),
            doorway: Doorway::new(handshake_time(timeout)),
        }
    }

    pub(crate) fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// Take the pending connections and start their handshakes; each
    /// result goes to `done`, then `wake` runs. `true`: more may wait
    /// (the listener is edge-triggered: call again without waiting for
    /// an event).
    pub(crate) fn accept_ready(
        &mut self,
        done: &crossbeam_channel::Sender<Accepted>,
        wake: &Arc<dyn Fn() + Send + Sync>,
    ) -> bool {
        let (id, expect, claimed) = (
            self.id.clone(),
            Arc::clone(&self.expect),
            Arc::clone(&self.claimed),
        );
        let (done, wake) = (done.clone(), Arc::clone(wake));
        let run: Handshake = Arc::new(move |stream, from, pass| {
            let result = handshake_one(stream, &id, &expect, &claimed, &pass);
            drop(pass);
            let _ = done.send(Accepted { from, result });
            wake();
        });
        let room = |ip| PENDING_PER_SOURCE + self.room.get(&ip).copied().unwrap_or(0);
        self.doorway
            .accept_ready(&self.listener, "meshwork-handshake", room, &run)
    }

    /// From now on, every rank is refused (formation is over).
    pub(crate) fn admit_nobody(&mut self) {
        lock(&self.expect).clear();
    }

    /// The ranks admitted or being admitted (see `Door::claimed`).
    pub(crate) fn claimed(&self) -> Arc<Mutex<BTreeSet<u32>>> {
        Arc::clone(&self.claimed)
    }

    /// The ranks admitted: whoever holds it may admit more (a tree's
    /// orphans, once formation is over).
    pub(crate) fn expecting(&self) -> Arc<Mutex<BTreeSet<u32>>> {
        Arc::clone(&self.expect)
    }
}

/// One connection's handshake: a rank it claims is released again if
/// the handshake fails after claiming it. A dialer that proved the token
/// stops counting as a stranger before it is told it is admitted, so no
/// newcomer can evict an admitted link.
fn handshake_one(
    mut stream: TcpStream,
    id: &Identity,
    expect: &Mutex<BTreeSet<u32>>,
    claimed: &Mutex<BTreeSet<u32>>,
    pass: &Pass,
) -> Result<(TcpStream, Admitted), (Option<u32>, HandshakeError)> {
    if let Err(e) = stream.set_nonblocking(false) {
        return Err((None, e.into()));
    }
    let took = Cell::new(None);
    let claim = |r: u32| {
        // Evicted already: its socket is cut, the reply will not go out.
        if !pass.proved() {
            return false;
        }
        let fresh = lock(expect).contains(&r) && lock(claimed).insert(r);
        if fresh {
            took.set(Some(r));
        }
        fresh
    };
    match handshake::accept(&mut stream, id, claim, pass.deadline) {
        Ok(admitted) => {
            let _ = stream.set_read_timeout(None);
            let _ = stream.set_write_timeout(None);
            Ok((stream, admitted))
        }
        Err(e) => {
            if let Some(r) = took.get() {
                lock(claimed).remove(&r);
            }
            Err(e)
        }
    }
}
