//! The guardian's table of registered cgroups, in memory it was given (no allocation), and
//! the wire format of the protocol. Both sides share the bounds, so the host knows, without
//! asking, when an add would not fit.
//!
//! Layout: `entries` holds [`ENTRY`]-byte records `id u64 | offset u32 | len u32` (little
//! endian), in the order of their offsets; `arena` holds the paths. An add appends its path
//! at the arena's end (compacting first when it does not fit); a remove shifts the records
//! after it down. So the bytes in use are always exactly the sum of the live paths' lengths,
//! the figure the host tracks.

/// Cgroups one guardian holds at most (one per contained `exit_with_parent` child alive).
pub(crate) const MAX_ENTRIES: usize = 8192;
/// Bytes of paths it holds at most (2 MiB: 256 bytes a cgroup when all 8,192 are in use).
pub(crate) const ARENA: usize = 2 << 20;
/// The longest cgroup directory path it takes (`PATH_MAX` less the NUL).
pub(crate) const MAX_PATH: usize = 4095;
/// The longest entry: a cgroup's path (at most [`MAX_PATH`]), or a command with its whole
/// environment (`commands.rs`: a host's environment is often beyond 4 KiB).
pub(crate) const MAX_ENTRY: usize = 64 << 10;
/// Bytes of one entry record.
const ENTRY: usize = 16;
/// Bytes of `entries`.
pub(crate) const ENTRIES_BYTES: usize = MAX_ENTRIES * ENTRY;

/// Host → guardian: `b'A' | id u64 | path` — guard this cgroup directory.
pub(crate) const ADD: u8 = b'A';
/// Host → guardian: `b'R' | id u64` — forget it (its close removed it).
pub(crate) const REMOVE: u8 = b'R';
/// Guardian → host, once set up: `b'H' | pid u32`, with a pidfd of itself (`SCM_RIGHTS`)
/// where `pidfd_open(2)` works.
pub(crate) const HELLO: u8 = b'H';
/// Guardian → host, instead of `HELLO`: `b'F' | errno i32` — its setup failed; it exits.
pub(crate) const FAILED: u8 = b'F';
/// The longest message.
pub(crate) const MAX_MESSAGE: usize = 1 + 8 + MAX_ENTRY;

/// The table, over memory of at least [`ENTRIES_BYTES`] and [`ARENA`] bytes.
pub(crate) struct Table<'m> {
    entries: &'m mut [u8],
    arena: &'m mut [u8],
    count: usize,
    /// The arena's end in use.
    tail: usize,
}

/// Why an add was refused (the host checks the same bounds first, so the guardian only
/// sees this if the two disagree).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

impl<'m> Table<'m> {
    pub(crate) fn new(entries: &'m mut [u8], arena: &'m mut [u8]) -> Table<'m> {
        Table {
            entries,
            arena,
            count: 0,
            tail: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    fn record(&self, i: usize) -> (u64, usize, usize) {
        let r = &self.entries[i * ENTRY..(i + 1) * ENTRY];
        let id = u64::from_le_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]);
        let off = u32::from_le_bytes([r[8], r[9], r[10], r[11]]) as usize;
        let len = u32::from_le_bytes([r[12], r[13], r[14], r[15]]) as usize;
        (id, off, len)
    }

    fn set_record(&mut self, i: usize, id: u64, off: usize, len: usize) {
        let r = &mut self.entries[i * ENTRY..(i + 1) * ENTRY];
        r[..8].copy_from_slice(&id.to_le_bytes());
        r[8..12].copy_from_slice(&(off as u32).to_le_bytes());
        r[12..].copy_from_slice(&(len as u32).to_le_bytes());
    }

    /// Whether an add of a path of `len` bytes fits, with `count` entries holding `bytes`.
    /// The one rule, used by both sides.
    pub(crate) fn fits(count: usize, bytes: usize, len: usize) -> bool {
        len <= MAX_ENTRY && count < MAX_ENTRIES && bytes + len <= ARENA
    }

    fn live_bytes(&self) -> usize {
        (0..self.count).map(|i| self.record(i).2).sum()
    }

    /// Registers `path` under `id`.
    pub(crate) fn add(&mut self, id: u64, path: &[u8]) -> Result<(), Full> {
        if !Table::fits(self.count, self.live_bytes(), path.len()) {
            return Err(Full);
        }
        if self.tail + path.len() > ARENA.min(self.arena.len()) {
            self.compact();
        }
        let off = self.tail;
        let end = off + path.len();
        if end > self.arena.len() || (self.count + 1) * ENTRY > self.entries.len() {
            return Err(Full);
        }
        self.arena[off..end].copy_from_slice(path);
        self.set_record(self.count, id, off, path.len());
        self.count += 1;
        self.tail = end;
        Ok(())
    }

    /// Forgets `id` (nothing if it is not there).
    pub(crate) fn remove(&mut self, id: u64) {
        if let Some(i) = (0..self.count).find(|&i| self.record(i).0 == id) {
            self.entries
                .copy_within((i + 1) * ENTRY..self.count * ENTRY, i * ENTRY);
            self.count -= 1;
            if self.count == 0 {
                self.tail = 0;
            }
        }
    }

    /// Moves the live paths down to the arena's start, in order (records are kept in offset
    /// order, so each move goes down and never over a path not yet moved).
    fn compact(&mut self) {
        let mut to = 0;
        for i in 0..self.count {
            let (id, off, len) = self.record(i);
            self.arena.copy_within(off..off + len, to);
            self.set_record(i, id, to, len);
            to += len;
        }
        self.tail = to;
    }

    /// The path of entry `i` (`i < len()`).
    pub(crate) fn path(&self, i: usize) -> &[u8] {
        let (_, off, len) = self.record(i);
        &self.arena[off..off + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_removes_keep_paths_and_compaction_makes_room() {
        let mut entries = vec![0u8; ENTRIES_BYTES];
        let mut arena = vec![0u8; ARENA];
        let mut table = Table::new(&mut entries, &mut arena);
        let long = vec![b'x'; MAX_PATH];
        let mut id = 0;
        // Fill the arena with long paths, removing every other one: the tail reaches the end
        // and later adds must compact.
        for round in 0..4 * ARENA / MAX_PATH {
            id += 1;
            let mut path = long.clone();
            path[0] = b'/';
            path[1] = (round % 256) as u8;
            table.add(id, &path).expect("fits after compaction");
            if id % 2 == 0 || table.len() * MAX_PATH > ARENA - 2 * MAX_PATH {
                table.remove(id - 1);
            }
        }
        for i in 0..table.len() {
            assert_eq!(table.path(i).len(), MAX_PATH);
            assert_eq!(table.path(i)[0], b'/');
        }
        assert!(table.add(id + 1, &vec![b'y'; MAX_ENTRY + 1]).is_err());
    }

    #[test]
    fn the_entry_bound_holds() {
        let mut entries = vec![0u8; ENTRIES_BYTES];
        let mut arena = vec![0u8; ARENA];
        let mut table = Table::new(&mut entries, &mut arena);
        for id in 0..MAX_ENTRIES as u64 {
            table.add(id, b"/a").unwrap();
        }
        assert_eq!(table.add(u64::MAX, b"/b"), Err(Full));
        table.remove(7);
        table.add(u64::MAX, b"/b").unwrap();
        assert_eq!(table.path(MAX_ENTRIES - 1), b"/b");
    }
}
