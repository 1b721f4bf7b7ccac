//! One region of host memory registered with an agent once, cut into buffers. Registering once
//! matters twice over: a peer's view of the region comes with the agent metadata it loads once
//! per connection (memory registered later would need that metadata sent again), and on an
//! RDMA fabric registration pins pages, which costs more than copying them.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use burn_kvcompress::cache::{HostAllocator, HostBuffer};
use nixl_sys::{Agent, MemType, MemoryRegion, NixlDescriptor, RegistrationHandle};

use super::engine::failed;
use crate::error::TransferError;

/// Where buffers start, and the unit their sizes are rounded up to, bytes (a cache line).
const ALIGN: usize = 64;

/// The registered bytes, as NIXL's registration sees them (host memory, device 0).
#[derive(Debug)]
struct Region {
    address: usize,
    len: usize,
}

impl MemoryRegion for Region {
    #[allow(unsafe_code)]
    unsafe fn as_ptr(&self) -> *const u8 {
        std::ptr::with_exposed_provenance(self.address)
    }

    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for Region {
    fn mem_type(&self) -> MemType {
        MemType::Dram
    }

    fn device_id(&self) -> u64 {
        0
    }
}

/// A registered region handing out [`ALIGN`]-aligned buffers (first fit) as a
/// [`HostAllocator`]; it has none to give once full, and its buffers keep it alive.
#[derive(Debug)]
pub(super) struct Arena {
    // Dropped in this order: deregistered before the memory is freed.
    _registration: RegistrationHandle,
    /// Owns the memory; never read or written through after creation (buffers write it through
    /// pointers, and so do peers).
    _memory: HostBuffer,
    /// Address of the first aligned byte (its provenance exposed).
    start: usize,
    /// Free runs, offset from `start` -> length, bytes; never adjacent (freed runs merge).
    free: Mutex<BTreeMap<usize, usize>>,
}

impl Arena {
    /// Allocates `bytes` (from `backing`, e.g. page-locked memory, where it can) and registers
    /// them with `agent`.
    pub(super) fn register(
        agent: &Agent,
        bytes: usize,
        backing: Option<&Arc<dyn HostAllocator>>,
    ) -> Result<Self, TransferError> {
        let mut memory = HostBuffer::zeroed(bytes + ALIGN, backing);
        let base = memory.as_mut_ptr().expose_provenance();
        let start = base.next_multiple_of(ALIGN);
        let usable = (bytes + ALIGN - (start - base)) / ALIGN * ALIGN;
        let registration = agent
            .register_memory(&Region { address: start, len: usable }, None)
            .map_err(|e| failed(&format!("registering {usable} bytes of host memory"), e))?;
        let free = (usable > 0).then_some((0, usable)).into_iter().collect();
        Ok(Self { _registration: registration, _memory: memory, start, free: Mutex::new(free) })
    }

    fn free_runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, usize>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl HostAllocator for Arena {
    fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
        let size = len.next_multiple_of(ALIGN);
        let mut free = self.free_runs();
        let (offset, run) = free.iter().map(|(&o, &r)| (o, r)).find(|&(_, run)| run >= size)?;
        free.remove(&offset);
        if run > size {
            free.insert(offset + size, run - size);
        }
        drop(free);
        let ptr = std::ptr::with_exposed_provenance_mut::<u8>(self.start + offset);
        // SAFETY: `[offset, offset + size)` was a free run of the region, which `_memory` keeps
        // allocated, and now belongs to this buffer alone; `len <= size`.
        #[allow(unsafe_code)]
        unsafe {
            ptr.write_bytes(0, len)
        };
        NonNull::new(ptr)
    }

    #[allow(unsafe_code)]
    unsafe fn free(&self, ptr: NonNull<u8>, len: usize) {
        let (mut offset, mut size) = (ptr.as_ptr().expose_provenance() - self.start, len.next_multiple_of(ALIGN));
        let mut free = self.free_runs();
        if let Some((&before, &run)) = free.range(..offset).next_back() {
            if before + run == offset {
                free.remove(&before);
                (offset, size) = (before, run + size);
            }
        }
        if let Some(run) = free.remove(&(offset + size)) {
            size += run;
        }
        free.insert(offset, size);
    }
}
