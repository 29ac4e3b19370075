//! `--alloc`: resident anonymous memory.

use std::hint;
use std::io;

use crate::sys::AnonMapping;

/// The stride at which pages are touched.
const PAGE: usize = 4096;

/// Bytes in one gibibyte.
const GIB: f64 = (1u64 << 30) as f64;

/// The mapping length for `gib` gibibytes, rounded up to whole 4 KiB pages;
/// `None` unless positive and representable.
pub fn bytes_for(gib: f64) -> Option<usize> {
    let bytes = (gib * GIB).ceil();
    // Half the address space: far beyond any real mapping, and safe to round.
    let limit = (usize::MAX / 2) as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes <= limit) {
        return None;
    }
    let bytes = bytes as usize;
    Some(bytes.div_ceil(PAGE) * PAGE)
}

/// Maps `gib` gibibytes and writes one byte in every 4 KiB page so all of
/// it is resident. With `hugepages`, asks for transparent huge pages first
/// (Linux only; `EINVAL` — THP unavailable — is ignored).
pub fn allocate(gib: f64, hugepages: bool) -> io::Result<AnonMapping> {
    let len = bytes_for(gib).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{gib} GiB is not a positive size"),
        )
    })?;
    let mut mapping = AnonMapping::new(len)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot mmap {len} bytes: {e}")))?;
    if hugepages {
        advise_hugepage(&mut mapping)?;
    }
    touch(mapping.as_mut_slice());
    Ok(mapping)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn advise_hugepage(mapping: &mut AnonMapping) -> io::Result<()> {
    match mapping.advise_hugepage() {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("madvise(MADV_HUGEPAGE): {e}"),
        )),
        Ok(()) => Ok(()),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn advise_hugepage(_mapping: &mut AnonMapping) -> io::Result<()> {
    Ok(())
}

/// Writes one non-zero byte per page, faulting every page in.
fn touch(bytes: &mut [u8]) {
    for byte in bytes.iter_mut().step_by(PAGE) {
        *byte = 1;
    }
    hint::black_box(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_pages() {
        assert_eq!(bytes_for(1.0), Some(1 << 30));
        assert_eq!(bytes_for(0.25), Some(1 << 28));
        assert_eq!(bytes_for(1e-9), Some(PAGE));
        assert_eq!(bytes_for(0.0), None);
        assert_eq!(bytes_for(-1.0), None);
        assert_eq!(bytes_for(f64::NAN), None);
        assert_eq!(bytes_for(f64::INFINITY), None);
    }

    #[test]
    fn small_allocation_is_touched() {
        let mut mapping = allocate(1.0 / 1024.0, true).unwrap();
        let bytes = mapping.as_mut_slice();
        assert_eq!(bytes.len(), 1 << 20);
        assert!(bytes.iter().step_by(PAGE).all(|&b| b == 1));
    }
}
