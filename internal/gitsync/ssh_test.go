package gitsync_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/test/gitrepo"
)

// serveSSH serves git-upload-pack over SSH to the one client key it returns (as a
// PEM file), and returns the server's address and a known_hosts file for it.
func serveSSH(t *testing.T) (addr, keyFile, knownHostsFile string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the test server needs the git binary")
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	require.NoError(t, err)
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	sshClientPub, err := ssh.NewPublicKey(clientPub)
	require.NoError(t, err)

	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != string(sshClientPub.Marshal()) {
			return nil, fmt.Errorf("unknown key")
		}
		return nil, nil
	}}
	cfg.AddHostKey(hostSigner)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveSSHConn(c, cfg, gitBin)
		}
	}()

	dir := t.TempDir()
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	require.NoError(t, err)
	keyFile = filepath.Join(dir, "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600))
	addr = l.Addr().String()
	knownHostsFile = filepath.Join(dir, "known_hosts")
	require.NoError(t, os.WriteFile(knownHostsFile, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostSigner.PublicKey())+"\n"), 0o600))
	return addr, keyFile, knownHostsFile
}

func serveSSHConn(c net.Conn, cfg *ssh.ServerConfig, gitBin string) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer func() { _ = ch.Close() }()
			for req := range chReqs {
				if req.Type != "exec" || len(req.Payload) < 4 {
					_ = req.Reply(false, nil)
					continue
				}
				// "git-upload-pack '/path'": the only command a fetch runs.
				line := string(req.Payload[4:])
				service, repo, ok := strings.Cut(line, " ")
				if !ok || service != "git-upload-pack" {
					_ = req.Reply(false, nil)
					continue
				}
				_ = req.Reply(true, nil)
				cmd := exec.Command(gitBin, "upload-pack", strings.Trim(repo, "'"))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
				}
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
				return
			}
		}()
	}
}

func TestSyncOverSSHVerifiesHostKeys(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	first := r.Commit("Release the Lease of pvc-a")
	addr, key, knownHosts := serveSSH(t)
	url := "ssh://git@" + addr + r.Bare

	var (
		res *gitsync.Result
		err error
	)
	withoutGit(t, func() {
		res, err = sync(t, newSyncer(t, gitsync.Options{Repo: url, GitSSHKeyFile: key, GitKnownHostsFile: knownHosts,
			Path: "requests", Namespaces: []string{ns}}))
	})
	require.NoError(t, err, "sync over SSH")
	assert.Equal(t, first, res.Commit)

	// Another host's key in known_hosts: the fetch is refused, never let through.
	_, _, otherKnownHosts := serveSSH(t)
	other, err := os.ReadFile(otherKnownHosts)
	require.NoError(t, err)
	_, otherKey, _ := strings.Cut(strings.TrimSpace(string(other)), " ")
	wrong := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(wrong, []byte(knownhosts.Normalize(addr)+" "+otherKey+"\n"), 0o600))
	_, err = sync(t, newSyncer(t, gitsync.Options{Repo: url, GitSSHKeyFile: key, GitKnownHostsFile: wrong,
		Path: "requests", Namespaces: []string{ns}}))
	require.Error(t, err, "a host key that is not in known_hosts was accepted")
	assert.ErrorContains(t, err, "key mismatch")
}
