//! A page-aligned buffer: the source of UFFDIO_COPY (one page, or a
//! read-around's worth), filled by a swap backend.

/// Heap memory of a whole number of pages, aligned to the page size
/// (the kernel copies whole pages from it; aligned, the copy runs at
/// full speed).
pub(crate) struct PageBuffer {
    ptr: *mut u8,
    len: usize,
    align: usize,
}

// SAFETY: owned heap memory, handed between threads whole.
unsafe impl Send for PageBuffer {}

impl PageBuffer {
    /// Room for `pages` pages (at least one) of `page_size` bytes.
    pub(crate) fn new(page_size: usize, pages: usize) -> PageBuffer {
        let len = page_size * pages.max(1);
        let layout = std::alloc::Layout::from_size_align(len, page_size).expect("page layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        PageBuffer {
            ptr,
            len,
            align: page_size,
        }
    }

    /// The first `len` bytes (at most the whole buffer).
    pub(crate) fn bytes(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: our allocation of self.len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.len)) }
    }

    /// The first byte, for the kernel to copy from.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The buffer's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        let layout =
            std::alloc::Layout::from_size_align(self.len, self.align).expect("page layout");
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::PageBuffer;

    #[test]
    fn a_buffer_is_page_aligned_zeroed_and_as_long_as_asked() {
        let mut b = PageBuffer::new(4096, 3);
        assert_eq!(b.len(), 3 * 4096);
        assert_eq!(b.ptr() as usize % 4096, 0);
        assert!(b.bytes(usize::MAX).iter().all(|&x| x == 0));
        assert_eq!(b.bytes(10).len(), 10);
        // Zero pages asked: one page all the same.
        assert_eq!(PageBuffer::new(4096, 0).len(), 4096);
    }
}
