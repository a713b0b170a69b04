//! A program's own error classes, codes and strings (MPI-5 §9.5):
//! `MPI_Add_error_class`, `MPI_Add_error_code`, `MPI_Add_error_string`
//! and MPI-4.1's `MPI_Remove_error_…`. They number from
//! `MPI_ERR_LASTCODE + 1` up, never reused; `MPI_LASTUSEDCODE` is the
//! highest in use; `MPI_Error_class` and `MPI_Error_string` know them.

use crate::consts::*;
use crate::put;
use crate::state::{entry, Fail, Result};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One of the program's classes or codes: its class (itself, for a
/// class) and its string, if it was given one.
struct Own {
    class: c_int,
    text: Option<String>,
}

struct Registry {
    next: c_int,
    all: BTreeMap<c_int, Own>,
}

static OWN: Mutex<Registry> = Mutex::new(Registry {
    next: ERR_LASTCODE + 1,
    all: BTreeMap::new(),
});

/// MPI's last predefined class (`MPI_ERR_ABI`).
const LAST_CLASS: c_int = 62;

/// The `MPI_LASTUSEDCODE` attribute's value, where `MPI_Comm_get_attr`
/// points.
pub(crate) static LAST_USED: AtomicI32 = AtomicI32::new(ERR_LASTCODE);

fn own() -> MutexGuard<'static, Registry> {
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The class and string of one of the program's codes or classes.
pub(crate) fn describe(code: c_int) -> Option<(c_int, String)> {
    own()
        .all
        .get(&code)
        .map(|o| (o.class, o.text.clone().unwrap_or_default()))
}

impl Registry {
    /// A new class (`class` None) or a code of `class`.
    fn add(&mut self, class: Option<c_int>) -> Result<c_int> {
        let code = self.next;
        if code == c_int::MAX {
            return Err(Fail::new(ERR_OTHER, "no error codes are left"));
        }
        self.next += 1;
        self.all.insert(
            code,
            Own {
                class: class.unwrap_or(code),
                text: None,
            },
        );
        self.note_last();
        Ok(code)
    }

    fn note_last(&self) {
        let last = self.all.keys().next_back().copied().unwrap_or(ERR_LASTCODE);
        LAST_USED.store(last, Ordering::Release);
    }

    /// Whether `c` is a class: MPI's or one of the program's.
    fn is_class(&self, c: c_int) -> bool {
        (0..=LAST_CLASS).contains(&c) || self.all.get(&c).is_some_and(|o| o.class == c)
    }

    fn get_mut(&mut self, code: c_int, what: &str) -> Result<&mut Own> {
        self.all
            .get_mut(&code)
            .ok_or_else(|| Fail::arg(format!("{code} is not an error {what} this program added")))
    }

    /// Remove `code` (a class if `class`): refused while it has a string,
    /// or (a class) codes.
    fn remove(&mut self, code: c_int, class: bool) -> Result<()> {
        let what = if class { "class" } else { "code" };
        let o = self.get_mut(code, what)?;
        if (o.class == code) != class {
            return Err(Fail::arg(format!("{code} is not an error {what}")));
        }
        if o.text.is_some() {
            return Err(Fail::arg(format!(
                "error {what} {code} still has a string: remove it first"
            )));
        }
        if class && self.all.iter().any(|(&k, o)| k != code && o.class == code) {
            return Err(Fail::arg(format!(
                "error class {code} still has codes: remove them first"
            )));
        }
        self.all.remove(&code);
        self.note_last();
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Add_error_class", || {
        if errorclass.is_null() {
            return Err(Fail::arg("errorclass is NULL"));
        }
        let c = own().add(None)?;
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(errorclass, c) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Add_error_code", || {
        if errorcode.is_null() {
            return Err(Fail::arg("errorcode is NULL"));
        }
        let mut reg = own();
        if !reg.is_class(errorclass) {
            return Err(Fail::arg(format!("{errorclass} is not an error class")));
        }
        let c = reg.add(Some(errorclass))?;
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(errorcode, c) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    entry(COMM_WORLD, "MPI_Add_error_string", || {
        if string.is_null() {
            return Err(Fail::arg("string is NULL"));
        }
        // SAFETY: a C string (the contract).
        let text = unsafe { CStr::from_ptr(string) }
            .to_string_lossy()
            .into_owned();
        if text.len() >= MAX_ERROR_STRING {
            return Err(Fail::arg(format!(
                "the string is {} bytes: at most {} fit",
                text.len(),
                MAX_ERROR_STRING - 1
            )));
        }
        own().get_mut(errorcode, "code or class")?.text = Some(text);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Remove_error_class", || {
        own().remove(errorclass, true)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Remove_error_code", || {
        own().remove(errorcode, false)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Remove_error_string", || {
        let mut reg = own();
        let o = reg.get_mut(errorcode, "code or class")?;
        if o.text.take().is_none() {
            return Err(Fail::arg(format!("error code {errorcode} has no string")));
        }
        Ok(())
    })
}
