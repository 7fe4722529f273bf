package replay

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// progress draws a one-line progress bar of finished trajectories.
type progress struct {
	w     io.Writer
	total int
	mu    sync.Mutex
	n     int
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total}
	p.draw()
	return p
}

func (p *progress) step() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.draw()
}

func (p *progress) done() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K")
}

// draw writes "\r[=====>    ] 12/42 trajectories".
func (p *progress) draw() {
	if p.w == nil {
		return
	}
	if p.total <= 0 {
		fmt.Fprintf(p.w, "\r%d trajectories replayed", p.n) // the total is not known ahead
		return
	}
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	fmt.Fprintf(p.w, "\r[%s] %d/%d trajectories", bar, p.n, p.total)
}
