//! Memory shared between the processes of one host: a rank's symmetric
//! heap ([`SharedRegion`]), which its same-host peers map and then read,
//! write and update atomically themselves (a put is a store into the
//! target's memory, an atomic a locked instruction on it), and the
//! segments of the shared-memory rings (`ring.rs`).
//!
//! Every region is a memfd. It has no name in any file system, so no
//! process finds it by listing `/dev/shm` and a crash leaves nothing
//! behind. Its creator makes it private (mode 0600), reserves its pages (a
//! lack of memory fails here, not later) and seals its size
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) before anyone maps it:
//! no process, the creator included, can shrink it under a peer's
//! mapping, so a load or store inside a mapping never raises SIGBUS.
//!
//! A peer opens it as `/proc/<pid>/fd/<fd>` of its creator, numbers the
//! creator sends it ([`Locator`]). They are the creator's word, so what
//! is opened is checked before it is mapped: a regular file of this
//! user's, private, of the expected size, sealed, and **bound**: its
//! memfd name, fixed when it was made and unchangeable, commits to a
//! binding only the parties to the sharing know — for a ring, a key
//! derived from the link's session keys; for a heap, the challenges its
//! same-host peers sent its owner over their own links
//! (`src/group/heap/share.rs`). A member that names another rank's
//! region, another job's, or one it made with another binding is refused,
//! and the pair uses messages instead. Once the peers have opened it, the
//! creator closes its descriptor ([`SharedRegion::withdraw`]): nothing
//! else can open it by the locator.
//!
//! Not covered: a process of the same user can open this user's
//! processes' descriptors through `/proc` by itself (and, where `ptrace`
//! is allowed, read and write their memory); sharing memory with a peer
//! of the same user trusts nobody new.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// Where a peer opens a region: its creator's process id and descriptor.
pub(crate) type Locator = (u32, u32);

/// The seals a region carries before anyone else maps it.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// What a region holds: part of its name, so a ring is never taken for a
/// heap, nor a heap for a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Heap,
    Ring,
}

/// The memfd name of a region of `kind` bound to `binding`: it commits to
/// the binding without revealing it.
fn name_of(kind: Kind, binding: &[u8]) -> String {
    let (what, context) = match kind {
        Kind::Heap => ("heap", "meshwork 2025 shared heap region name v1"),
        Kind::Ring => ("ring", "meshwork 2025 shared ring segment name v1"),
    };
    let digest = blake3::derive_key(context, binding);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("meshwork-{what}-{hex}")
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Make a sealed, private region of `len` bytes of `kind`, bound to
/// `binding`, its pages reserved.
pub(super) fn create_region(kind: Kind, len: usize, binding: &[u8]) -> io::Result<OwnedFd> {
    let off = libc::off_t::try_from(len).map_err(|_| invalid("a region that large"))?;
    let name = CString::new(name_of(kind, binding)).map_err(|_| invalid("NUL in a name"))?;
    // Not executable, where the kernel knows the flag (since 6.3; a
    // kernel that requires it refuses memfds without it).
    let mut fd = -1;
    for flags in [
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_NOEXEC_SEAL,
        libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
    ] {
        // SAFETY: `name` is a valid NUL-terminated string.
        fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            break;
        }
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `memfd_create` returned a descriptor this function now owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `fd` is an open descriptor.
    if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let r = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, off) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // SAFETY: as above; F_ADD_SEALS takes an int.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Open the region of `kind` that `owner` says is at `/proc/<pid>/fd/<fd>`,
/// which must be a regular file of this user's, private to it, of `len`
/// bytes, sealed against shrinking and growing, and bound to `binding`.
pub(super) fn open_region(
    owner: Locator,
    kind: Kind,
    len: usize,
    binding: &[u8],
) -> io::Result<OwnedFd> {
    let (pid, fd) = owner;
    let path = format!("/proc/{pid}/fd/{fd}");
    // A first look at what the link leads to, so that a device or a FIFO
    // is never opened (the link cannot carry O_NOFOLLOW: it is the way in).
    if !std::fs::metadata(&path)?.file_type().is_file() {
        return Err(invalid("not a regular file"));
    }
    let c = CString::new(path).map_err(|_| invalid("NUL in a path"))?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let raw = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `open` returned a descriptor this function now owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    check_region(&fd, kind, len, binding)?;
    Ok(fd)
}

/// Whether `fd` (opened from a peer's locator) is the region it must be:
/// see [`open_region`].
fn check_region(fd: &OwnedFd, kind: Kind, len: usize, binding: &[u8]) -> io::Result<()> {
    // SAFETY: all-zero is a valid `stat`, filled in by `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `geteuid` has no preconditions.
    let me = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(invalid("not a regular file"));
    }
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        return Err(invalid("not private to this user"));
    }
    if u64::try_from(st.st_size).ok() != Some(len as u64) {
        return Err(invalid("not of the expected size"));
    }
    // SAFETY: `fd` is open; F_GET_SEALS takes no argument.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & SEALS != SEALS {
        return Err(invalid(
            "not sealed: its owner could shrink it under this rank's mapping",
        ));
    }
    let want = format!("/memfd:{} (deleted)", name_of(kind, binding));
    let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    if name.as_os_str() != want.as_str() {
        return Err(invalid(
            "not bound to this pair (another rank's, or another job's)",
        ));
    }
    Ok(())
}

/// The locator of this process's region `fd`.
pub(super) fn locator_of(fd: &OwnedFd) -> Option<Locator> {
    Some((std::process::id(), u32::try_from(fd.as_raw_fd()).ok()?))
}

/// A mapped region of `AtomicU64` words (see the module docs).
#[derive(Debug)]
pub struct SharedRegion {
    base: NonNull<AtomicU64>,
    words: usize,
    /// The region's descriptor while peers may still open it (this
    /// process made it).
    offered: Mutex<Option<OwnedFd>>,
}

// SAFETY: the region is memory of atomics only, mapped for as long as the
// value lives; sharing it between threads is what atomics are for.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// A zeroed region of `words` words, bound to `binding` (what a peer
    /// must give [`open`](Self::open) to map it).
    pub fn create(words: usize, binding: &[u8]) -> io::Result<SharedRegion> {
        let fd = create_region(Kind::Heap, bytes_of(words)?, binding)?;
        let region = map(&fd, words)?;
        *region.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(fd);
        Ok(region)
    }

    /// Map the region of `words` words that its owner says is at `owner`
    /// (its process id and descriptor), if it is one bound to `binding`.
    ///
    /// # Errors
    ///
    /// `InvalidData` naming what is wrong (not sealed, not private, not
    /// the expected size, bound to something else); the system's error if
    /// it cannot be opened or mapped.
    pub fn open(owner: (u32, u32), words: usize, binding: &[u8]) -> io::Result<SharedRegion> {
        let fd = open_region(owner, Kind::Heap, bytes_of(words)?, binding)?;
        map(&fd, words)
    }

    /// Where peers open it (this process's id and the region's
    /// descriptor), until it is withdrawn.
    pub fn locator(&self) -> Option<(u32, u32)> {
        self.offered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(locator_of)
    }

    /// Close the descriptor (every mapping stays): once the peers have
    /// mapped it, nothing else can open it by its locator.
    pub fn withdraw(&self) {
        drop(
            self.offered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }

    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` maps `words` words, page-aligned, for as long as
        // `self` lives; any bit pattern is a valid `AtomicU64`, and other
        // processes' concurrent accesses are atomic operations too. The
        // region is sealed against shrinking: no access inside it faults.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.words) }
    }
}

fn bytes_of(words: usize) -> io::Result<usize> {
    match words.checked_mul(8) {
        Some(n) if n > 0 && i64::try_from(n).is_ok() => Ok(n),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a region of that many words",
        )),
    }
}

fn map(fd: &OwnedFd, words: usize) -> io::Result<SharedRegion> {
    Ok(SharedRegion {
        base: map_shared(fd, bytes_of(words)?)?.cast(),
        words,
        offered: Mutex::new(None),
    })
}

/// Map `len` bytes of `fd`, shared, readable and writable.
pub(super) fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of an open file; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        self.withdraw();
        // SAFETY: `base`/`words` are the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.words * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    const BOUND: &[u8] = b"the challenges of this region's mappers";

    #[test]
    fn a_peer_maps_the_owners_words_and_both_see_each_others_atomics() {
        // A binding of this test's own: a descriptor number freed here and
        // reused by another test's region is never this one's.
        const BOUND: &[u8] = b"the mapping test's mappers";
        let owner = SharedRegion::create(4, BOUND).unwrap();
        let at = owner.locator().unwrap();
        assert_eq!(at.0, std::process::id());
        let peer = SharedRegion::open(at, 4, BOUND).unwrap();
        owner.words()[1].store(41, Ordering::SeqCst);
        assert_eq!(peer.words()[1].fetch_add(1, Ordering::SeqCst), 41);
        assert_eq!(owner.words()[1].load(Ordering::SeqCst), 42);
        assert!(SharedRegion::open(at, 5, BOUND).is_err(), "another size");
        owner.withdraw();
        assert_eq!(owner.locator(), None);
        assert!(SharedRegion::open(at, 4, BOUND).is_err(), "withdrawn");
        drop(owner);
        // The peer's mapping outlives the owner's.
        assert_eq!(peer.words()[1].load(Ordering::SeqCst), 42);
    }

    /// A hostile member names, as its own region, another rank's (bound
    /// to other mappers), a file of its own in `/dev/shm` (private, of
    /// the right size: all the old checks held), an unsealed memfd with
    /// the right name, and a ring: each is refused by what it is.
    #[test]
    fn a_region_that_is_not_bound_to_this_pair_is_refused() {
        let other = SharedRegion::create(4, b"another rank's mappers").unwrap();
        let e = SharedRegion::open(other.locator().unwrap(), 4, BOUND).unwrap_err();
        assert!(e.to_string().contains("not bound"), "{e}");

        let path = format!("/dev/shm/meshwork-{}-heap-hostile", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let file = OwnedFd::from(file);
        // SAFETY: an open descriptor.
        assert_eq!(unsafe { libc::fchmod(file.as_raw_fd(), 0o600) }, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::ftruncate(file.as_raw_fd(), 32) }, 0);
        let e = SharedRegion::open(locator_of(&file).unwrap(), 4, BOUND).unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");

        let name = CString::new(name_of(Kind::Heap, BOUND)).unwrap();
        // SAFETY: a valid name; the descriptor is owned below.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just returned to this process.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an open descriptor.
        assert_eq!(unsafe { libc::fchmod(unsealed.as_raw_fd(), 0o600) }, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::ftruncate(unsealed.as_raw_fd(), 32) }, 0);
        let e = SharedRegion::open(locator_of(&unsealed).unwrap(), 4, BOUND).unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");

        let ring = create_region(Kind::Ring, 32, BOUND).unwrap();
        let e = SharedRegion::open(locator_of(&ring).unwrap(), 4, BOUND).unwrap_err();
        assert!(e.to_string().contains("not bound"), "{e}");

        let genuine = SharedRegion::create(4, BOUND).unwrap();
        assert!(SharedRegion::open(genuine.locator().unwrap(), 4, BOUND).is_ok());
    }

    /// A hostile owner shrinks its region under a peer's mapping: the
    /// kernel refuses (the seals), and the peer's next access is an
    /// ordinary load, not a SIGBUS that would end this process.
    #[test]
    fn an_owner_cannot_shrink_its_region_under_a_peers_mapping() {
        let owner = SharedRegion::create(1024, BOUND).unwrap();
        let (_, fd) = owner.locator().unwrap();
        let peer = SharedRegion::open(owner.locator().unwrap(), 1024, BOUND).unwrap();
        let fd = fd as libc::c_int;
        // SAFETY: the owner's open descriptor.
        assert_ne!(unsafe { libc::ftruncate(fd, 0) }, 0, "shrunk");
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        // SAFETY: as above.
        assert_ne!(unsafe { libc::ftruncate(fd, 1 << 20) }, 0, "grown");
        // Nor through a peer's own descriptor; nor can seals be added.
        let again = open_region(owner.locator().unwrap(), Kind::Heap, 8192, BOUND).unwrap();
        // SAFETY: an open descriptor.
        assert_ne!(unsafe { libc::ftruncate(again.as_raw_fd(), 0) }, 0);
        // SAFETY: as above; F_ADD_SEALS takes an int.
        let more = unsafe { libc::fcntl(again.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_ne!(more, 0, "sealed against more seals");
        peer.words()[1023].store(7, Ordering::SeqCst);
        assert_eq!(owner.words()[1023].load(Ordering::SeqCst), 7);
    }
}
