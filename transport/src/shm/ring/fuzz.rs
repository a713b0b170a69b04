//! The ring's fuzz entry (`fuzzing::shm_ring`): a script of a producer's
//! writes and publications and a consumer's reads and frees on one ring,
//! from an honest producer or, with raw words anywhere in the data area
//! and lies in the consumer's `tail`, a hostile one.

use super::*;
use crate::fuzzing::Input;

/// The byte at position `i` of an honest producer's stream: it does not
/// repeat with the ring, so bytes overwritten a lap early are seen.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// Run script `data` on a fresh ring of the smallest capacity. Honest (its
/// first byte even): every byte published comes out once, in order, and
/// the ring is never refused. Hostile: the consumer reads at most what it
/// asks for, or refuses the ring; it never panics.
pub(crate) fn fuzz_ring(data: &[u8]) {
    let Ok(a) = Segment::create(MIN_CAPACITY, b"the ring fuzz target") else {
        return;
    };
    let Some(at) = a.locator() else {
        return;
    };
    let Ok(b) = Segment::open(at, MIN_CAPACITY, b"the ring fuzz target") else {
        return;
    };
    let mut s = Input::new(data);
    let honest = s.u8().is_multiple_of(2);
    let cap = MIN_CAPACITY as u64;
    let (mut head, mut cur) = (0u64, Cursor::default());
    let (mut written, mut published, mut read) = (0u64, 0u64, 0u64);
    let mut src = vec![0u8; 2 * MIN_CAPACITY];
    let mut dst = vec![0u8; 8192];
    while !s.done() {
        match s.u8() % if honest { 4 } else { 6 } {
            0 => {
                let n = usize::from(s.u16()) % src.len() + 1;
                for (i, x) in src[..n].iter_mut().enumerate() {
                    *x = pattern(written + i as u64);
                }
                let took = match b.write(&mut head, &src[..n]) {
                    Ok(took) => took,
                    Err(Corrupt) if !honest => return,
                    Err(Corrupt) => panic!("an honest ring is refused to its producer"),
                };
                assert!(took <= n);
                written += took as u64;
            }
            1 => {
                b.publish(head, None);
                published = written;
            }
            2 => {
                let want = usize::from(s.u16()) % dst.len() + 1;
                let n = match a.read(&mut cur, &mut dst[..want]) {
                    Ok(n) => n,
                    Err(Corrupt) if !honest => return,
                    Err(Corrupt) => panic!("an honest ring is refused"),
                };
                assert!(n <= want);
                if honest {
                    for (i, &x) in dst[..n].iter().enumerate() {
                        assert_eq!(x, pattern(read + i as u64), "byte {}", read + i as u64);
                    }
                    assert!(read + n as u64 <= published, "read past what was published");
                }
                read += n as u64;
            }
            3 => {
                a.free(&cur);
            }
            4 => {
                let at = u64::from(s.u16()) % (cap / 8) * 8;
                // Marks for this lap or the next few, where the reader is.
                let lap = (head / cap + u64::from(s.u8() % 3)) * cap;
                let w = match s.u8() % 3 {
                    0 => b.mark(lap + at),
                    1 => u64::from(s.u16()),
                    _ => s.u64(),
                };
                b.word(at).store(w, Ordering::Relaxed);
            }
            _ => a.control().tail.0.store(s.u64(), Ordering::Relaxed),
        }
    }
    if honest {
        // Everything written comes out once published.
        b.publish(head, None);
        loop {
            let n = a.read(&mut cur, &mut dst).expect("an honest ring");
            a.free(&cur);
            if n == 0 {
                break;
            }
            for (i, &x) in dst[..n].iter().enumerate() {
                assert_eq!(x, pattern(read + i as u64));
            }
            read += n as u64;
        }
        assert_eq!(read, written, "published bytes left unread");
        assert_eq!(a.has_unread(), Ok(false));
    }
}
