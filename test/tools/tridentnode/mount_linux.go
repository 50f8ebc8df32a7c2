package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mounter does the plugin's mounts. The image has no mount binary to rely on, so the
// system's is the mount(2) syscall.
type Mounter interface {
	// BindMount bind-mounts src onto dst, read-only if readOnly.
	BindMount(src, dst string, readOnly bool) error
	// Unmount unmounts the topmost mount at path.
	Unmount(path string) error
	// IsMountPoint reports whether something is mounted at path (false if path is missing).
	IsMountPoint(path string) (bool, error)
}

type sysMounter struct{}

func (sysMounter) BindMount(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", src, dst, err)
	}
	if readOnly {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(dst, 0)
			return fmt.Errorf("remount %s read-only: %w", dst, err)
		}
	}
	return nil
}

func (sysMounter) Unmount(path string) error {
	if err := unix.Unmount(path, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// IsMountPoint looks path up in /proc/self/mountinfo. Comparing st_dev with the parent's, as
// simpler checks do, misses bind mounts from the same filesystem, which is all this plugin
// makes.
func (sysMounter) IsMountPoint(path string) (bool, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close() //nolint:errcheck
	return mountinfoHas(bufio.NewScanner(f), filepath.Clean(p))
}

// mountinfoHas reports whether a mountinfo line has mount point p (field 5, octal-escaped).
func mountinfoHas(sc *bufio.Scanner, p string) (bool, error) {
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && unescapeMountinfo(fields[4]) == p {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the kernel's \ooo escapes of space, tab, newline and backslash.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
