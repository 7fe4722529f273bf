//go:build !linux

package tokens

// mapHuge maps nothing here: the caller allocates on the heap.
func mapHuge(int) (mem, mapping []byte) { return nil, nil }

func unmap([]byte) {}
