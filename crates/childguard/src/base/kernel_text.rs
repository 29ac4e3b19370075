//! Text files the kernel makes up as they are read (`/proc`, cgroupfs): read whole, in one
//! `read(2)` when they fit in a page.
//!
//! `std::fs::read_to_string` is made for files that know their size. These say 0 in `stat`,
//! so std starts with a 32-byte probe and doubles from there: `/proc/self/mountinfo` took 8
//! reads, `/proc/self/stat` 6 — and a `seq_file` rebuilds the text up to where each read
//! starts, so each small read redoes the work of the ones before it. One page first, then
//! doubling, reads the usual file in one call plus the one that sees its end.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::Path;

/// The first read's size: one page, which holds `stat`, `status`, `cgroup` and most
/// `mountinfo` files whole.
const FIRST_READ: usize = 4096;

/// The whole text of `path`. Errors as `std::fs::read_to_string`: opening or reading
/// (`path` is not named in them: callers say what they were reading), `InvalidData` if it is
/// not UTF-8.
pub fn read(path: impl AsRef<Path>) -> io::Result<String> {
    read_file(File::open(path)?)
}

/// The whole text of a file already open (a cgroup control file opened relative to its
/// directory's fd: `process/containment/at.rs`). Errors as [`read`].
pub(crate) fn read_file(mut file: File) -> io::Result<String> {
    let mut bytes = vec![0; FIRST_READ];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_file_larger_than_the_first_read_whole() {
        let dir = std::env::temp_dir().join(format!("kernel-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big");
        let text: String = (0..3 * FIRST_READ)
            .map(|i| (b'a' + (i % 26) as u8) as char)
            .collect();
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_proc_files_as_std_does() {
        // Files that cannot change between the two reads: the kernel's file systems, this
        // process's command line.
        for path in ["/proc/filesystems", "/proc/self/cmdline"] {
            let ours = read(path).unwrap();
            let std = std::fs::read_to_string(path).unwrap();
            assert_eq!(ours, std, "{path}");
        }
    }

    #[test]
    fn names_what_is_wrong_with_text_that_is_not_utf8() {
        let dir = std::env::temp_dir().join(format!("kernel-text-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(read(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
