// SPDX-License-Identifier: MIT

package scenario

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/mptun/mptun/internal/netns"
)

// reaper is a small shell process that deletes this process's namespaces
// (killing whatever runs inside them) once its stdin closes: at the end of
// a run, or when this process dies, even by SIGKILL, which no deferred
// cleanup survives. It is a shell script rather than a re-execution of this
// binary so that it works from any program that embeds the lab.
type reaper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

const reaperScript = `trap '' INT TERM HUP
cat >/dev/null
for n in $(ls /run/netns 2>/dev/null | grep "^$1-"); do
	for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	ip netns del "$n" 2>/dev/null
done
exit 0`

func startReaper() (*reaper, error) {
	prefix := fmt.Sprintf("%s-%d", netns.Prefix, os.Getpid())
	cmd := exec.Command("sh", "-c", reaperScript, "reaper", prefix)
	// Own process group: a Ctrl-C at the terminal must not kill the
	// reaper before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	return &reaper{cmd: cmd, stdin: in}, nil
}

// stop lets the reaper do a last sweep and waits for it.
func (r *reaper) stop() {
	if r == nil {
		return
	}
	r.stdin.Close()
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
}
