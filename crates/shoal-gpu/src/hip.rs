//! AMD GPUs through HIP (hip-sys), behind the `hip` cargo feature because hip-sys links ROCm's
//! `libamdhip64` at build time. Only calls whose ABI is stable across ROCm releases are used
//! (device count, attributes, memory info); `hipGetDeviceProperties` changed layout in ROCm 6
//! and is avoided (`docs/rust-stack.md` §2).

use hip_sys::hiprt;

/// A HIP runtime call that failed, and the `hipError_t` it returned.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {code:?}")]
pub struct HipError {
    pub call: &'static str,
    pub code: hiprt::hipError_t,
}

/// What HIP sees: `Ok(n)` devices, or why it sees none (`hipErrorNoDevice` on a host without an
/// AMD GPU is `Ok(0)`: no device is an answer, not an error).
pub fn device_count() -> Result<u32, HipError> {
    let mut count: i32 = 0;
    // SAFETY: a plain out-parameter call into the HIP runtime.
    let err = unsafe { hiprt::hipGetDeviceCount(&mut count) };
    match err {
        hiprt::hipError_t::hipSuccess => Ok(count.max(0) as u32),
        hiprt::hipError_t::hipErrorNoDevice => Ok(0),
        code => Err(HipError {
            call: "hipGetDeviceCount",
            code,
        }),
    }
}

/// The HIP runtime version, e.g. 50221153 for 5.2.21153.
pub fn runtime_version() -> Result<i32, HipError> {
    let mut v: i32 = 0;
    // SAFETY: a plain out-parameter call into the HIP runtime.
    let err = unsafe { hiprt::hipRuntimeGetVersion(&mut v) };
    match err {
        hiprt::hipError_t::hipSuccess => Ok(v),
        code => Err(HipError {
            call: "hipRuntimeGetVersion",
            code,
        }),
    }
}

/// Compute units of HIP device `index`.
pub fn compute_units(index: u32) -> Result<u32, HipError> {
    let mut v: i32 = 0;
    // SAFETY: a plain out-parameter call; the attribute enum comes from the same bindings.
    let err = unsafe {
        hiprt::hipDeviceGetAttribute(
            &mut v,
            hiprt::hipDeviceAttribute_t::hipDeviceAttributeMultiprocessorCount,
            index as i32,
        )
    };
    match err {
        hiprt::hipError_t::hipSuccess => Ok(v.max(0) as u32),
        code => Err(HipError {
            call: "hipDeviceGetAttribute",
            code,
        }),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hip_answers_cleanly_with_or_without_a_device() {
        let version = super::runtime_version().expect("the HIP runtime loads");
        assert!(version > 0);
        let n = super::device_count().expect("no device is an answer, not an error");
        for i in 0..n {
            assert!(super::compute_units(i).unwrap() > 0);
        }
        println!("HIP runtime {version}: {n} devices");
    }
}
