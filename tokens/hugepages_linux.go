//go:build linux

package tokens

import (
	"syscall"
	"unsafe"
)

// mapHuge maps size bytes of zeroed memory outside the Go heap, aligned to hugePage and
// advised to the kernel as transparent-huge-page memory (which Go's own heap is not, where
// the kernel's setting is madvise, the common default). It returns the memory and the whole
// mapping, for unmap; nil when the memory cannot be mapped, and the caller allocates on the
// heap instead. Without the advice (a kernel whose setting is never), the memory is still
// good, in small pages.
func mapHuge(size int) (mem, mapping []byte) {
	size = (size + hugePage - 1) &^ (hugePage - 1)
	m, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil
	}
	off := -int(uintptr(unsafe.Pointer(unsafe.SliceData(m)))) & (hugePage - 1)
	mem = m[off : off+size : off+size]
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE) // advice: without it, small pages
	return mem, m
}

// unmap releases a mapping mapHuge made.
func unmap(mapping []byte) { _ = syscall.Munmap(mapping) }
