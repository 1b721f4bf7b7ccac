//! The device's primary context made current on the calling thread: what a direct driver or
//! cuBLAS call needs to address CubeCL's CUDA buffers.
//!
//! CubeCL's CUDA runtime works in each device's primary context, so its buffers are valid
//! pointers in that context; a thread that calls the driver or cuBLAS itself (the decoding thread,
//! a test's thread) must have it current first.

use std::cell::Cell;

use cubecl::cuda::CudaDevice;
use cudarc::driver::result as driver;

thread_local! {
    /// The ordinal whose primary context this thread made current, if any.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Makes `device`'s primary context current on this thread (once per thread and device);
/// `false` if the driver does not start or the device is not there.
pub(crate) fn make_current(device: &CudaDevice) -> bool {
    if CURRENT.get() == Some(device.index) {
        return true;
    }
    let made = (|| {
        driver::init().ok()?;
        let ordinal = i32::try_from(device.index).ok()?;
        // SAFETY: `ordinal` names a device CubeCL's runtime opened (its tensors live on it);
        // retaining its primary context and making it current is what that runtime does on its
        // own threads.
        #[allow(unsafe_code)]
        unsafe {
            let context = driver::primary_ctx::retain(driver::device::get(ordinal).ok()?).ok()?;
            driver::ctx::set_current(context).ok()
        }
    })()
    .is_some();
    if made {
        CURRENT.set(Some(device.index));
    }
    made
}
