// Package reprotar writes the release's tarballs reproducibly: every entry dated at the
// Unix epoch, owned by root, in PAX format, so that two builds of one commit give the same
// bytes whatever the build machine's clock, user or umask. Both release tools (ociimage
// and pack) write through it.
package reprotar

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"time"
)

// Header is the reproducible header of an entry name of type typ, mode and size.
func Header(name string, typ byte, mode, size int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: time.Unix(0, 0).UTC(), Format: tar.FormatPAX}
}

// AddFile adds the regular file at path to tw as name with mode.
func AddFile(tw *tar.Writer, name, path string, mode int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if err := tw.WriteHeader(Header(name, tar.TypeReg, mode, st.Size())); err != nil {
		return err
	}
	r, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	_, err = io.Copy(tw, r)
	return err
}

// WriteFile writes out through a temporary file, renamed into place once complete, so
// that an interrupted release never leaves a truncated artifact under its final name.
func WriteFile(out string, write func(io.Writer) error) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	if err := write(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
