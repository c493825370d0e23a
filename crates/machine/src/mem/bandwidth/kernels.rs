//! The loops a pass runs (sum, fill, copy; ordinary and streaming stores),
//! with the vector width chosen at run time.

use super::CopyMethod;

/// The widest vectors the loops may use, detected at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Isa {
    /// What the compiler targets by default (SSE2 on x86_64).
    Baseline,
    /// 256-bit AVX2.
    Avx2,
}

impl Isa {
    pub(super) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
        Isa::Baseline
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Isa::Avx2 => "256-bit AVX2",
            Isa::Baseline if cfg!(target_arch = "x86_64") => "128-bit SSE2",
            Isa::Baseline => "baseline-vector",
        }
    }
}

/// Sum of all words, eight independent accumulators.
#[inline(always)]
fn sum_words(words: &[u64]) -> u64 {
    let mut a = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        a[0] = a[0].wrapping_add(c[0]);
        a[1] = a[1].wrapping_add(c[1]);
        a[2] = a[2].wrapping_add(c[2]);
        a[3] = a[3].wrapping_add(c[3]);
        a[4] = a[4].wrapping_add(c[4]);
        a[5] = a[5].wrapping_add(c[5]);
        a[6] = a[6].wrapping_add(c[6]);
        a[7] = a[7].wrapping_add(c[7]);
    }
    for &w in chunks.remainder() {
        a[0] = a[0].wrapping_add(w);
    }
    a.iter().fold(0, |s, &x| s.wrapping_add(x))
}

/// Store `value` into every word, eight per step.
#[inline(always)]
pub(super) fn fill_words(words: &mut [u64], value: u64) {
    let mut chunks = words.chunks_exact_mut(8);
    for c in &mut chunks {
        c[0] = value;
        c[1] = value;
        c[2] = value;
        c[3] = value;
        c[4] = value;
        c[5] = value;
        c[6] = value;
        c[7] = value;
    }
    for w in chunks.into_remainder() {
        *w = value;
    }
}

/// Copy `src` into `dst` (same length), eight words per step. Written out
/// so that no single store has a stride equal to its size: LLVM's
/// loop-idiom pass would otherwise turn the loop into a memcpy call.
#[inline(always)]
fn copy_words(dst: &mut [u64], src: &[u64]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let v = [s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]];
        d[0] = v[0];
        d[1] = v[1];
        d[2] = v[2];
        d[3] = v[3];
        d[4] = v[4];
        d[5] = v[5];
        d[6] = v[6];
        d[7] = v[7];
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = *s;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The same loops compiled for AVX2 (called only after detection).

    #[target_feature(enable = "avx2")]
    pub fn sum_words(words: &[u64]) -> u64 {
        super::sum_words(words)
    }

    #[target_feature(enable = "avx2")]
    pub fn fill_words(words: &mut [u64], value: u64) {
        super::fill_words(words, value)
    }

    #[target_feature(enable = "avx2")]
    pub fn copy_words(dst: &mut [u64], src: &[u64]) {
        super::copy_words(dst, src)
    }
}

#[inline(never)]
pub(super) fn read_pass(words: &[u64], isa: Isa) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: Isa::Avx2 is only chosen after runtime detection.
        return unsafe { avx2::sum_words(words) };
    }
    let _ = isa;
    sum_words(words)
}

#[inline(never)]
pub(super) fn write_pass(words: &mut [u64], value: u64, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: Isa::Avx2 is only chosen after runtime detection.
        return unsafe { avx2::fill_words(words, value) };
    }
    let _ = isa;
    fill_words(words, value)
}

#[inline(never)]
pub(super) fn copy_pass(dst: &mut [u64], src: &[u64], method: CopyMethod, isa: Isa) {
    match method {
        CopyMethod::Memcpy => {
            let n = dst.len().min(src.len());
            dst[..n].copy_from_slice(&src[..n]);
        }
        CopyMethod::LoopNt => copy_nt_pass(dst, src, isa),
        CopyMethod::Loop => {
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2 {
                // SAFETY: Isa::Avx2 is only chosen after runtime detection.
                return unsafe { avx2::copy_words(dst, src) };
            }
            copy_words(dst, src)
        }
    }
}

/// Streaming stores; on other architectures (never reached: `Op::parse`
/// refuses them) ordinary stores.
#[inline(never)]
pub(super) fn write_nt_pass(words: &mut [u64], value: u64, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 {
            // SAFETY: AVX2 detected implies AVX.
            unsafe { streaming::fill_avx(words, value) }
        } else {
            // SAFETY: SSE2 is part of every x86_64 CPU.
            unsafe { streaming::fill_sse2(words, value) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        fill_words(words, value)
    }
}

#[inline(never)]
fn copy_nt_pass(dst: &mut [u64], src: &[u64], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 {
            // SAFETY: AVX2 detected implies AVX.
            unsafe { streaming::copy_avx(dst, src) }
        } else {
            // SAFETY: SSE2 is part of every x86_64 CPU.
            unsafe { streaming::copy_sse2(dst, src) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        copy_words(dst, src)
    }
}

#[cfg(target_arch = "x86_64")]
mod streaming {
    //! Non-temporal stores. A streaming store needs an address aligned to
    //! its width: a few words before the first aligned one and after the
    //! last whole vector use ordinary stores. `sfence` at the end orders
    //! the weakly-ordered streaming stores before anything that follows.

    use core::arch::x86_64::*;

    /// Words before `ptr` reaches `align` bytes (at most len).
    fn head_words(ptr: *const u64, align: usize, len: usize) -> usize {
        (((align - ptr as usize % align) % align) / 8).min(len)
    }

    #[target_feature(enable = "avx")]
    pub fn fill_avx(words: &mut [u64], value: u64) {
        let head = head_words(words.as_ptr(), 32, words.len());
        let (front, rest) = words.split_at_mut(head);
        front.fill(value);
        let v = _mm256_set1_epi64x(value as i64);
        let vectors = rest.len() / 4;
        let p = rest.as_mut_ptr().cast::<__m256i>();
        let mut i = 0;
        // SAFETY: p is 32-byte aligned (head skipped); every i < vectors
        // is inside `rest`.
        unsafe {
            while i + 4 <= vectors {
                _mm256_stream_si256(p.add(i), v);
                _mm256_stream_si256(p.add(i + 1), v);
                _mm256_stream_si256(p.add(i + 2), v);
                _mm256_stream_si256(p.add(i + 3), v);
                i += 4;
            }
            while i < vectors {
                _mm256_stream_si256(p.add(i), v);
                i += 1;
            }
            _mm_sfence();
        }
        rest[vectors * 4..].fill(value);
    }

    #[target_feature(enable = "sse2")]
    pub fn fill_sse2(words: &mut [u64], value: u64) {
        let head = head_words(words.as_ptr(), 16, words.len());
        let (front, rest) = words.split_at_mut(head);
        front.fill(value);
        let v = _mm_set1_epi64x(value as i64);
        let vectors = rest.len() / 2;
        let p = rest.as_mut_ptr().cast::<__m128i>();
        let mut i = 0;
        // SAFETY: p is 16-byte aligned; every i < vectors is inside `rest`.
        unsafe {
            while i + 4 <= vectors {
                _mm_stream_si128(p.add(i), v);
                _mm_stream_si128(p.add(i + 1), v);
                _mm_stream_si128(p.add(i + 2), v);
                _mm_stream_si128(p.add(i + 3), v);
                i += 4;
            }
            while i < vectors {
                _mm_stream_si128(p.add(i), v);
                i += 1;
            }
            _mm_sfence();
        }
        rest[vectors * 2..].fill(value);
    }

    #[target_feature(enable = "avx")]
    pub fn copy_avx(dst: &mut [u64], src: &[u64]) {
        let n = dst.len().min(src.len());
        let head = head_words(dst.as_ptr(), 32, n);
        dst[..head].copy_from_slice(&src[..head]);
        let vectors = (n - head) / 4;
        let d = dst[head..].as_mut_ptr().cast::<__m256i>();
        let s = src[head..].as_ptr().cast::<__m256i>();
        let mut i = 0;
        // SAFETY: d is 32-byte aligned; s is read unaligned; every i <
        // vectors is inside both slices (both have n - head words left).
        unsafe {
            while i + 4 <= vectors {
                let a = _mm256_loadu_si256(s.add(i));
                let b = _mm256_loadu_si256(s.add(i + 1));
                let c = _mm256_loadu_si256(s.add(i + 2));
                let e = _mm256_loadu_si256(s.add(i + 3));
                _mm256_stream_si256(d.add(i), a);
                _mm256_stream_si256(d.add(i + 1), b);
                _mm256_stream_si256(d.add(i + 2), c);
                _mm256_stream_si256(d.add(i + 3), e);
                i += 4;
            }
            while i < vectors {
                _mm256_stream_si256(d.add(i), _mm256_loadu_si256(s.add(i)));
                i += 1;
            }
            _mm_sfence();
        }
        let done = head + vectors * 4;
        dst[done..n].copy_from_slice(&src[done..n]);
    }

    #[target_feature(enable = "sse2")]
    pub fn copy_sse2(dst: &mut [u64], src: &[u64]) {
        let n = dst.len().min(src.len());
        let head = head_words(dst.as_ptr(), 16, n);
        dst[..head].copy_from_slice(&src[..head]);
        let vectors = (n - head) / 2;
        let d = dst[head..].as_mut_ptr().cast::<__m128i>();
        let s = src[head..].as_ptr().cast::<__m128i>();
        let mut i = 0;
        // SAFETY: d is 16-byte aligned; s is read unaligned; every i <
        // vectors is inside both slices.
        unsafe {
            while i + 4 <= vectors {
                let a = _mm_loadu_si128(s.add(i));
                let b = _mm_loadu_si128(s.add(i + 1));
                let c = _mm_loadu_si128(s.add(i + 2));
                let e = _mm_loadu_si128(s.add(i + 3));
                _mm_stream_si128(d.add(i), a);
                _mm_stream_si128(d.add(i + 1), b);
                _mm_stream_si128(d.add(i + 2), c);
                _mm_stream_si128(d.add(i + 3), e);
                i += 4;
            }
            while i < vectors {
                _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
                i += 1;
            }
            _mm_sfence();
        }
        let done = head + vectors * 2;
        dst[done..n].copy_from_slice(&src[done..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_what_they_claim() {
        let src: Vec<u64> = (0..1003u64).map(|i| i * 7 + 1).collect();
        let expect: u64 = src.iter().fold(0, |a, &b| a.wrapping_add(b));
        for isa in [Isa::Baseline, Isa::detect()] {
            assert_eq!(read_pass(&src, isa), expect);
            let mut w = vec![0u64; 1003];
            write_pass(&mut w, 42, isa);
            assert!(w.iter().all(|&x| x == 42));
            for method in CopyMethod::available() {
                let mut d = vec![0u64; 1003];
                copy_pass(&mut d, &src, method, isa);
                assert_eq!(d, src, "{method:?} {isa:?}");
                // Unaligned destination: the streaming paths fix up the head.
                let mut d = vec![0u64; 1004];
                copy_pass(&mut d[1..], &src, method, isa);
                assert_eq!(&d[1..], &src[..], "{method:?} {isa:?} unaligned");
            }
            if cfg!(target_arch = "x86_64") {
                let mut w = vec![0u64; 1005];
                write_nt_pass(&mut w[1..], 7, isa);
                assert!(w[1..].iter().all(|&x| x == 7));
                assert_eq!(w[0], 0);
            }
        }
    }
}
