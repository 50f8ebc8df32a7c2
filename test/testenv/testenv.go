package testenv

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
}

// Root returns the repository root, found from this file's location.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testenv: cannot locate source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(scheme.Scheme))
}

// Start starts kube-apiserver and etcd from bin/ with the CRDs from
// charts/remediator/files/crds installed. Use it from TestMain and Stop it afterwards.
func Start() (*Env, error) {
	ctrl.SetLogger(klog.NewKlogr())
	root := Root()
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("envtest needs %s in %s: run `make bins` (or `make test`, which builds it): %w", b, bin, err)
		}
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "charts", "remediator", "files", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{Config: cfg, Client: c, env: e}, nil
}

// StartT starts an Env for one test and stops it when the test ends: for packages
// whose other tests need no control plane.
func StartT(t testing.TB) *Env {
	t.Helper()
	e, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return e
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Main is a TestMain body: it starts an Env, stores it in *env, runs the tests and
// stops it. A fuzzing run that runs no tests (go test -run='^$' -fuzz=...) starts no
// control plane: the fuzz targets need none, and go test runs TestMain again in
// every fuzz worker it starts, so each would pay for its own kube-apiserver.
func Main(m *testing.M, env **Env) {
	if fuzzOnly() {
		os.Exit(m.Run())
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

// fuzzOnly reports a go test process that only fuzzes: a fuzz worker, or the
// coordinator of -fuzz with -run='^$'. Tests run in it would find *env nil.
func fuzzOnly() bool {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return true
	}
	fz, run := flag.Lookup("test.fuzz"), flag.Lookup("test.run")
	return fz != nil && fz.Value.String() != "" && run != nil && run.Value.String() == "^$"
}

// GVK is the RemediationRequest kind, for unstructured tests.
var GVK = schema.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "RemediationRequest"}
