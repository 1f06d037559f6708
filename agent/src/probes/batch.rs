//! Reading a whole hash map in a few system calls (`BPF_MAP_LOOKUP_BATCH`, Linux ≥ 5.6)
//! instead of two per entry (aya's iterator: `GET_NEXT_KEY`, then `LOOKUP_ELEM`). With 1,000
//! pools and nine maps that was ~20,000 system calls a collection; batched it is a handful
//! per map. aya 0.14 has no batch operations, so ppscope asks for them itself (`sys.rs`).
//!
//! [`for_each`] and [`per_cpu_entries`] say so (`None`, `false`) when the kernel
//! does not do batches for the map (older kernels, `EINVAL`/`ENOTSUPP`): the caller then
//! iterates as before. One batch's bytes are in memory at a time: the whole map's raw bytes
//! beside the values made from them were the agent's peak memory at 10,000 pools (the pools'
//! rare-event records are 1.3 KB each).
use std::{
    io, mem,
    os::fd::{AsFd, AsRawFd},
};

use aya::{maps::MapData, Pod};
use aya_obj::generated::{bpf_attr, bpf_cmd};

/// Entries asked for per call at first; doubled when a hash bucket holds more (`ENOSPC`).
/// Large enough that 10,000 pools take three calls a map, not twenty.
const FIRST_BATCH: u32 = 4096;
/// The kernel's `ENOTSUPP` (524), which is not in libc: "operation not supported" from BPF.
const ENOTSUPP: i32 = 524;

/// A per-CPU map's entries, flat: each key and its value on every possible CPU. One buffer
/// for the whole map: a `Vec` per entry was a tenth of the agent's time at 10,000 pools
/// (`malloc`/`free` in `perf`).
#[derive(Debug, Clone, PartialEq)]
pub struct PerCpuRows<K, V> {
    keys: Vec<K>,
    /// Key `i`'s value on CPU `c` is at `i * cpus + c`.
    values: Vec<V>,
    cpus: usize,
}

impl<K: Copy, V: Copy> PerCpuRows<K, V> {
    pub fn new(cpus: usize) -> Self {
        Self {
            keys: Vec::new(),
            values: Vec::new(),
            cpus: cpus.max(1),
        }
    }

    /// Adds a key with its values, one per CPU (missing CPUs read as `V::default()`).
    pub fn push(&mut self, key: K, per_cpu: impl IntoIterator<Item = V>)
    where
        V: Default,
    {
        let end = self.values.len() + self.cpus;
        self.keys.push(key);
        self.values.extend(per_cpu.into_iter().take(self.cpus));
        self.values.resize(end, V::default());
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Changes every value in place: `f(key, cpu, value)`.
    pub fn fold_in(&mut self, mut f: impl FnMut(K, usize, &mut V)) {
        for (key, values) in self.keys.iter().zip(self.values.chunks_mut(self.cpus)) {
            for (cpu, v) in values.iter_mut().enumerate() {
                f(*key, cpu, v);
            }
        }
    }

    /// Each key with its values, one per CPU.
    pub fn iter(&self) -> impl Iterator<Item = (K, &[V])> + '_ {
        self.keys
            .iter()
            .zip(self.values.chunks(self.cpus))
            .map(|(k, v)| (*k, v))
    }
}

/// Calls `f` with every (key, value) of a map with one value per key, a batch at a time;
/// false (and `f` never called) when the kernel does not batch this map.
pub fn for_each<K: Pod, V: Pod>(map: &MapData, mut f: impl FnMut(K, V)) -> io::Result<bool> {
    let (ks, vs) = (mem::size_of::<K>(), mem::size_of::<V>());
    lookup_batches(map, ks, vs, |keys, values| {
        for i in 0..keys.len() / ks {
            f(read::<K>(keys, i * ks), read::<V>(values, i * vs));
        }
    })
}

/// Every (key, one value per possible CPU) of a per-CPU map, or `None` when the kernel does
/// not batch this map. The kernel lays each CPU's value out at 8-byte strides.
pub fn per_cpu_entries<K: Pod, V: Pod>(
    map: &MapData,
    cpus: usize,
) -> io::Result<Option<PerCpuRows<K, V>>> {
    let stride = mem::size_of::<V>().next_multiple_of(8);
    let mut rows = PerCpuRows {
        keys: Vec::new(),
        values: Vec::new(),
        cpus,
    };
    let batched = lookup_batches(map, mem::size_of::<K>(), stride * cpus, |keys, values| {
        let n = keys.len() / mem::size_of::<K>();
        rows.keys
            .extend((0..n).map(|i| read::<K>(keys, i * mem::size_of::<K>())));
        rows.values
            .extend((0..n * cpus).map(|j| read::<V>(values, j * stride)));
    })?;
    Ok(batched.then_some(rows))
}

fn read<T: Pod>(buf: &[u8], at: usize) -> T {
    assert!(at + mem::size_of::<T>() <= buf.len());
    // SAFETY: in bounds (checked above); T is Pod (any bit pattern is a value), and the
    // buffer is bytes, so the read is unaligned.
    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast::<T>()) }
}

/// Hands `each` every batch of keys and values as the kernel wrote them (`key_size` and
/// `value_size` bytes each), one batch's buffers reused for the next; false when this map
/// cannot be read in batches here (before any batch was handed over).
fn lookup_batches(
    map: &MapData,
    key_size: usize,
    value_size: usize,
    mut each: impl FnMut(&[u8], &[u8]),
) -> io::Result<bool> {
    let fd = map.fd().as_fd().as_raw_fd();
    // Not zero-filled: the kernel writes the entries it returns, and only those are looked at.
    // Zeroing room for 4,096 entries of every map at each collection, most of it never
    // written, was a third of the agent's time at 1,000 pools (`memset` in `perf`).
    let mut keys: Vec<u8> = Vec::new();
    let mut values: Vec<u8> = Vec::new();
    let mut count = FIRST_BATCH;
    // The position token: opaque to userspace, a u32 bucket index for hash maps; 8 bytes
    // (at least the key size, as the kernel's documentation asks) covers every map here.
    let mut token = [0u64; 2];
    let mut next = [0u64; 2];
    let mut first = true;
    loop {
        keys.clear();
        keys.reserve(count as usize * key_size);
        values.clear();
        values.reserve(count as usize * value_size);
        // SAFETY: bpf_attr is plain data; all zero is its "unused" value.
        let mut attr: bpf_attr = unsafe { mem::zeroed() };
        // SAFETY: writing the batch member of a zeroed union of plain integers.
        let b = unsafe { &mut attr.batch };
        b.in_batch = if first { 0 } else { token.as_ptr() as u64 };
        b.out_batch = next.as_mut_ptr() as u64;
        b.keys = keys.as_mut_ptr() as u64;
        b.values = values.as_mut_ptr() as u64;
        b.count = count;
        b.map_fd = fd as u32;
        // SAFETY: the pointers in attr point into buffers with room for `count` entries, and
        // the token buffers outlive the call; the kernel writes at most that much.
        let err = unsafe { super::sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) }.err();
        // SAFETY: reading the batch member of a union of plain integers; the kernel wrote how
        // many entries it returned (only trusted below where it returned some).
        let got = (unsafe { attr.batch.count } as usize).min(count as usize);
        let end = match err.as_ref().and_then(io::Error::raw_os_error) {
            None => false,
            // The end of the map (with the last entries, possibly none).
            Some(libc::ENOENT) => true,
            // One hash bucket holds more than `count`: ask for more at once, same position.
            Some(libc::ENOSPC) if got == 0 => {
                count = count.saturating_mul(2);
                continue;
            }
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(ENOTSUPP) if first => {
                return Ok(false)
            }
            Some(_) => return Err(err.unwrap()),
        };
        // SAFETY: on success or at the end of the map the kernel wrote `got` entries' keys and
        // values from the buffers' start, within their capacity: those bytes are initialised.
        unsafe {
            keys.set_len(got * key_size);
            values.set_len(got * value_size);
        }
        each(&keys, &values);
        if end {
            return Ok(true);
        }
        token = next;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use aya::maps::{HashMap, IterableMap, Map, PerCpuHashMap, PerCpuValues};
    use aya_obj::generated::bpf_map_type::{BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH};

    use super::*;

    /// The maps ppscope reads are LRU hashes, plain and per-CPU. 3,000 entries in a table of
    /// 4,096: several batches, and buckets holding more than one entry.
    const ENTRIES: u64 = 3_000;

    fn create(map_type: u32, key: usize, value: usize) -> MapData {
        let obj = aya_obj::Map::new_from_params(map_type, key as u32, value as u32, 4096, 0);
        MapData::create(obj, "pp_batch_test", None).expect("create a BPF map (root?)")
    }

    #[test]
    #[ignore = "needs root (BPF maps): run through `cargo xtask test`"]
    fn batches_read_exactly_what_the_one_by_one_walk_reads() {
        let mut map = Map::LruHashMap(create(BPF_MAP_TYPE_LRU_HASH as u32, 8, 16));
        {
            let mut h: HashMap<_, u64, [u64; 2]> = HashMap::try_from(&mut map).unwrap();
            for i in 0..ENTRIES {
                h.insert(i * 7919, [i, !i], 0).unwrap();
            }
        }
        let h: HashMap<_, u64, [u64; 2]> = HashMap::try_from(&map).unwrap();
        let mut batched = Vec::new();
        assert!(
            for_each::<u64, [u64; 2]>(h.map(), |k, v| batched.push((k, v))).unwrap(),
            "this kernel batches LRU hashes"
        );
        let mut walked: Vec<(u64, [u64; 2])> = h.iter().map(Result::unwrap).collect();
        batched.sort();
        walked.sort();
        assert_eq!(batched.len(), ENTRIES as usize);
        assert_eq!(batched, walked);

        // Per CPU, with a 12-byte value: the kernel pads each CPU's copy to 8 bytes.
        let cpus = aya::util::nr_cpus().unwrap();
        let mut map = Map::PerCpuLruHashMap(create(BPF_MAP_TYPE_LRU_PERCPU_HASH as u32, 8, 12));
        {
            let mut h: PerCpuHashMap<_, u64, [u32; 3]> = PerCpuHashMap::try_from(&mut map).unwrap();
            for i in 0..ENTRIES {
                let per_cpu: Vec<[u32; 3]> = (0..cpus as u32).map(|c| [i as u32, c, 7]).collect();
                h.insert(i, PerCpuValues::try_from(per_cpu).unwrap(), 0)
                    .unwrap();
            }
        }
        let h: PerCpuHashMap<_, u64, [u32; 3]> = PerCpuHashMap::try_from(&map).unwrap();
        let rows = per_cpu_entries::<u64, [u32; 3]>(h.map(), cpus)
            .unwrap()
            .expect("this kernel batches per-CPU LRU hashes");
        let mut batched: Vec<(u64, Vec<[u32; 3]>)> =
            rows.iter().map(|(k, v)| (k, v.to_vec())).collect();
        batched.sort();
        assert_eq!(batched.len(), ENTRIES as usize);
        for (i, (key, per_cpu)) in batched.iter().enumerate() {
            assert_eq!(*key, i as u64);
            let want: Vec<[u32; 3]> = (0..cpus as u32).map(|c| [i as u32, c, 7]).collect();
            assert_eq!(per_cpu, &want, "entry {i}");
        }
    }

    #[test]
    #[ignore = "needs root (BPF maps): run through `cargo xtask test`"]
    fn an_empty_map_is_read_as_empty() {
        let map = Map::LruHashMap(create(BPF_MAP_TYPE_LRU_HASH as u32, 8, 8));
        let h: HashMap<_, u64, u64> = HashMap::try_from(&map).unwrap();
        let mut read = Vec::new();
        assert!(for_each::<u64, u64>(h.map(), |k, v| read.push((k, v))).unwrap());
        assert_eq!(read, Vec::new());
    }
}
