//! A region of words shared between the processes of one host: a rank's
//! symmetric heap, which its same-host peers map and then read, write and
//! update atomically themselves (a put is a store into the target's
//! memory, an atomic a locked instruction on it), with no message and no
//! thread of the target involved.
//!
//! The owner creates the file (`/dev/shm/meshwork-<pid>-heap-<random>`,
//! mode 0600, its pages reserved so a full tmpfs fails here and not later
//! with a bus error) and unlinks it once the peers have mapped it (or when
//! the region is dropped); a file left by an owner that crashed in between
//! is swept by the next formation on this host (its name carries the dead
//! process's id). A peer maps it by the path the owner sent over an
//! authenticated link, after checking that it is one of meshwork's names,
//! a regular file of this user's, private to it, and of the announced
//! size. Processes of one user can already read and write each other's
//! memory (`ptrace`): sharing the heap with them trusts nobody new.

use super::ring::cpath;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// The longest path a region is announced by.
pub const REGION_PATH_MAX: usize = 96;

/// A mapped region of `AtomicU64` words (see the module docs).
#[derive(Debug)]
pub struct SharedRegion {
    base: NonNull<AtomicU64>,
    words: usize,
    /// The file, until it is unlinked (this process made it).
    path: Mutex<Option<String>>,
}

// SAFETY: the region is memory of atomics only, mapped for as long as the
// value lives; sharing it between threads is what atomics are for.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// A zeroed region of `words` words in a new file of this process's.
    pub fn create(words: usize) -> io::Result<SharedRegion> {
        let len = bytes_of(words)?;
        let path = format!(
            "/dev/shm/meshwork-{}-heap-{:016x}",
            std::process::id(),
            super::setup::random()
        );
        let c = cpath(&path)?;
        let fd = create_file(&c, len)?;
        let made = map(&fd, words);
        match made {
            Ok(region) => {
                *region.path.lock().unwrap_or_else(|e| e.into_inner()) = Some(path);
                Ok(region)
            }
            Err(e) => {
                // SAFETY: `c` is a valid path; the file is this call's.
                unsafe { libc::unlink(c.as_ptr()) };
                Err(e)
            }
        }
    }

    /// Map a peer's region of `words` words, announced at `path`.
    pub fn open(path: &str, words: usize) -> io::Result<SharedRegion> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
        if !is_region_path(path) {
            return Err(bad("not a meshwork heap's path"));
        }
        let fd = open_file(&cpath(path)?, bytes_of(words)?)?;
        map(&fd, words)
    }

    /// The path peers map it by, until it is unlinked.
    pub fn path(&self) -> Option<String> {
        self.path.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Remove the file (every mapping stays): once the peers have mapped
    /// it, nothing else can.
    pub fn unlink(&self) {
        let path = self.path.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(c) = path.and_then(|p| cpath(&p).ok()) {
            // SAFETY: `c` is a valid path, a file this process made.
            unsafe { libc::unlink(c.as_ptr()) };
        }
    }

    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` maps `words` words, page-aligned, for as long as
        // `self` lives; any bit pattern is a valid `AtomicU64`, and other
        // processes' concurrent accesses are atomic operations too.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.words) }
    }
}

/// Whether `path` is one of the names [`SharedRegion::create`] makes (a
/// peer's announcement is checked before anything is opened).
pub fn is_region_path(path: &str) -> bool {
    path.len() <= REGION_PATH_MAX
        && path.starts_with("/dev/shm/meshwork-")
        && path.contains("-heap-")
        && !path.contains("..")
        && !path[9..].contains('/')
}

/// Create the file `path` (which must not exist), private to this user
/// (mode 0600: the umask may narrow it, never widen it), with the pages of
/// its `len` bytes reserved (a full tmpfs fails here, not later with a bus
/// error). The file is removed again if that fails.
pub(super) fn create_file(path: &CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `open` returned a descriptor this function now owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `fd` is an open descriptor.
    let r = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t) };
    if r != 0 {
        // SAFETY: `path` is a valid path; the file is this call's.
        unsafe { libc::unlink(path.as_ptr()) };
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(fd)
}

/// Open a peer's file `path`, which must be a regular file of this
/// user's, private to it, of `len` bytes.
pub(super) fn open_file(path: &CStr, len: usize) -> io::Result<OwnedFd> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    // SAFETY: `path` is a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `open` returned a descriptor this function now owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid `stat`, filled in by `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `geteuid` has no preconditions.
    let me = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(bad("not a regular file"));
    }
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        return Err(bad("not private to this user"));
    }
    if st.st_size != len as libc::off_t {
        return Err(bad("not the announced size"));
    }
    Ok(fd)
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
        path: Mutex::new(None),
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
        self.unlink();
        // SAFETY: `base`/`words` are the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.words * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_peer_maps_the_owners_words_and_both_see_each_others_atomics() {
        let owner = SharedRegion::create(4).unwrap();
        let path = owner.path().unwrap();
        assert!(is_region_path(&path), "{path}");
        let peer = SharedRegion::open(&path, 4).unwrap();
        owner.words()[1].store(41, Ordering::SeqCst);
        assert_eq!(peer.words()[1].fetch_add(1, Ordering::SeqCst), 41);
        assert_eq!(owner.words()[1].load(Ordering::SeqCst), 42);
        // Another size than the file's, another name: refused.
        assert!(SharedRegion::open(&path, 5).is_err());
        assert!(SharedRegion::open("/dev/shm/meshwork-1-r0-p1-ring", 4).is_err());
        assert!(SharedRegion::open("/etc/passwd", 4).is_err());
        drop(owner);
        assert!(
            !std::path::Path::new(&path).exists(),
            "unlinked with its owner"
        );
        // The peer's mapping outlives the file.
        assert_eq!(peer.words()[1].load(Ordering::SeqCst), 42);
    }
}
