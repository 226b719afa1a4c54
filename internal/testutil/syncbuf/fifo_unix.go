//go:build unix

package syncbuf

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FIFO is a file that takes no writes until Release: a named pipe nobody
// reads yet, as a disk or a pipe that stalls. Once its pipe buffer is full,
// every write to it blocks. After Release what is written is read, until
// the writer closes it; Written returns it then.
type FIFO struct {
	// Path is where to open it for writing.
	Path string

	r       *os.File
	release sync.Once
	done    chan struct{}
	out     bytes.Buffer
}

// NewFIFO makes a FIFO in t's temporary directory. At the end of the test
// it is released, and closed once the writer has closed it.
func NewFIFO(t testing.TB) *FIFO {
	t.Helper()
	f := &FIFO{Path: filepath.Join(t.TempDir(), "fifo"), done: make(chan struct{})}
	if err := syscall.Mkfifo(f.Path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	// Opened now, non-blocking, so that opening it for writing does not
	// wait for a reader; nothing reads from it until Release.
	var err error
	if f.r, err = os.OpenFile(f.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Release()
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the writer did not close it within 10s of the test's end", f.Path)
		}
		f.r.Close() // a read still waiting returns
		<-f.done
	})
	return f
}

// Release starts reading what is written, until the writer closes the file.
func (f *FIFO) Release() {
	f.release.Do(func() {
		go func() {
			defer close(f.done)
			// The file is in the runtime's poller: a read waits for data, and
			// ends at the writer's close (EOF) or at the reader's.
			f.out.ReadFrom(f.r)
		}()
	})
}

// Written is what went through the file, once the writer has closed it.
func (f *FIFO) Written() []byte {
	f.Release()
	<-f.done
	return f.out.Bytes()
}
