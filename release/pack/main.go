// Command pack writes the release's archives, krew plugin manifest and checksums
// (`make release`):
//
//	pack archive -o OUT.tar.gz FILE...
//	    a gzipped tarball of the files, by base name, owned by root and dated at the Unix
//	    epoch, so that the same files give the same archive on any machine.
//	pack krew -o remediator.yaml -version vX.Y.Z -url URL_PREFIX ARCHIVE...
//	    the krew Plugin manifest of `kubectl remediator`: one platform per
//	    remediator_<version>_<os>_<arch>.tar.gz archive, at URL_PREFIX/<archive>, with its
//	    sha256.
//	pack checksums -o checksums.txt DIR
//	    the sha256sum-format sums of every file under DIR (but OUT itself), sorted by path.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/remediator/remediator/release/internal/reprotar"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: pack archive|krew|checksums FLAGS ARGS"))
	}
	var err error
	switch os.Args[1] {
	case "archive":
		err = archiveCmd(os.Args[2:])
	case "krew":
		err = krewCmd(os.Args[2:])
	case "checksums":
		err = checksumsCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (archive, krew, checksums)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pack:", err)
	os.Exit(1)
}

func archiveCmd(args []string) error {
	flags := flag.NewFlagSet("archive", flag.ContinueOnError)
	out := flags.String("o", "", "output .tar.gz")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || flags.NArg() == 0 {
		return errors.New("usage: pack archive -o OUT.tar.gz FILE [FILE]")
	}
	return reprotar.WriteFile(*out, func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
		if err != nil {
			return err
		}
		tw := tar.NewWriter(zw)
		for _, file := range flags.Args() {
			if err := addFile(tw, file); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return zw.Close()
	})
}

// addFile adds file to tw under its base name, keeping only its executable bits.
func addFile(tw *tar.Writer, file string) error {
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	return reprotar.AddFile(tw, filepath.Base(file), file, mode)
}

func sha256File(file string) (string, error) {
	r, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer func() { _ = r.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// archiveName is a release archive's name: remediator_<version>_<os>_<arch>.tar.gz.
var archiveName = regexp.MustCompile(`^remediator_(v[^_]+)_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)

type krewPlatform struct{ OS, Arch, URI, SHA256 string }

var krewManifest = template.Must(template.New("krew").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: remediator
spec:
  version: {{.Version}}
  homepage: https://github.com/remediator/remediator
  shortDescription: Scan and plan NetApp Trident storage remediations
  description: |
    The command line of Remediator, a GitOps-driven remediation controller for
    NetApp Trident storage incidents. ` + "`kubectl remediator scan`" + ` finds stuck LUKS
    Leases and deregistered CSI node plugins, ` + "`plan`" + ` checks a remediation
    request against the policies before it is proposed, and ` + "`pause`" + ` and
    ` + "`resume`" + ` stop and restart the controller's remediations.
  platforms:
{{- range .Platforms}}
  - selector:
      matchLabels:
        os: {{.OS}}
        arch: {{.Arch}}
    uri: {{.URI}}
    sha256: {{.SHA256}}
    files:
    - from: remediator
      to: .
    - from: LICENSE
      to: .
    bin: remediator
{{- end}}
`))

func krewCmd(args []string) error {
	flags := flag.NewFlagSet("krew", flag.ContinueOnError)
	out := flags.String("o", "", "output manifest (remediator.yaml)")
	version := flags.String("version", "", "release version, vX.Y.Z")
	url := flags.String("url", "", "where the archives are downloaded from (the release's URL)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || *version == "" || *url == "" || flags.NArg() == 0 {
		return errors.New("usage: pack krew -o remediator.yaml -version vX.Y.Z -url URL_PREFIX ARCHIVE [ARCHIVE]")
	}
	var platforms []krewPlatform
	for _, a := range flags.Args() {
		m := archiveName.FindStringSubmatch(filepath.Base(a))
		if m == nil || m[1] != *version {
			return fmt.Errorf("%s: want remediator_%s_<os>_<arch>.tar.gz", a, *version)
		}
		sum, err := sha256File(a)
		if err != nil {
			return err
		}
		platforms = append(platforms, krewPlatform{OS: m[2], Arch: m[3], URI: strings.TrimSuffix(*url, "/") + "/" + filepath.Base(a), SHA256: sum})
	}
	return reprotar.WriteFile(*out, func(w io.Writer) error {
		return krewManifest.Execute(w, struct {
			Version   string
			Platforms []krewPlatform
		}{*version, platforms})
	})
}

func checksumsCmd(args []string) error {
	flags := flag.NewFlagSet("checksums", flag.ContinueOnError)
	out := flags.String("o", "", "output file (sha256sum format)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || flags.NArg() != 1 {
		return errors.New("usage: pack checksums -o checksums.txt DIR")
	}
	dir := flags.Arg(0)
	outAbs, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if abs, err := filepath.Abs(p); err != nil || abs == outAbs || abs == outAbs+".tmp" {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	return reprotar.WriteFile(*out, func(w io.Writer) error {
		for _, f := range files {
			sum, err := sha256File(filepath.Join(dir, f))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s  %s\n", sum, f); err != nil {
				return err
			}
		}
		return nil
	})
}
