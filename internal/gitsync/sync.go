package gitsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/argoproj/gitops-engine/pkg/cache"
	"github.com/argoproj/gitops-engine/pkg/engine"
	"github.com/argoproj/gitops-engine/pkg/utils/kube"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Annotations the sync puts on every request it applies.
const (
	// AnnotationGitCommit is the last commit that changed the request's file, so that a
	// request's status can be traced back to the pull request that asked for it.
	AnnotationGitCommit = v1alpha1.AnnotationGitCommit
	// AnnotationGitPath is the request's file in the repository.
	AnnotationGitPath = "remediator.io/git-path"
	// AnnotationSyncSource marks requests this sync manages (a hash of repository and
	// path). Only marked requests are ever pruned, so requests created by hand or by
	// another source are never deleted by a sync.
	AnnotationSyncSource = "remediator.io/sync-source"
)

// Options configure a Syncer.
type Options struct {
	// Repo is a URL (https://, ssh://, git@host:path, file://) or a local path.
	Repo string
	// AllowInsecureTransport accepts a repository read over an unencrypted transport
	// (http://, git://), which anyone on the network path can rewrite; without it New
	// refuses one (see checkTransport).
	AllowInsecureTransport bool
	// GitUsername is the user for GitPasswordFile (default "git", what token auth
	// takes) or for an SSH URL without one.
	GitUsername string
	// GitPasswordFile holds an HTTPS token or password (a mounted Secret's key).
	GitPasswordFile string
	// GitSSHKeyFile holds a PEM private key for an SSH URL; GitKnownHostsFile, which
	// it requires, holds the host keys it is verified against.
	GitSSHKeyFile     string
	GitKnownHostsFile string
	// Revision is a branch, tag or commit.
	Revision string
	// Path is the directory under the repository root holding the requests.
	Path string
	// Namespaces are the namespaces requests may be synced into; the first one is
	// the default for manifests without a namespace.
	Namespaces []string
	// WorkDir holds the bare clone between syncs.
	WorkDir string
	// Prune deletes managed requests that are no longer in Git.
	Prune bool
	// PoliciesPath, when set, is the directory of CUE policies in the repository:
	// they are synced too, into ConfigMap PoliciesConfigMap, which the controller
	// loads as its --policies-dir.
	PoliciesPath      string
	PoliciesConfigMap types.NamespacedName
	Log               logr.Logger
}

// Result is what one sync did.
type Result struct {
	Commit string
	// Applied and Pruned list "namespace/name: message", sorted.
	Applied []string
	Pruned  []string
	// PolicyDigest is the digest of the policies synced, when Options.PoliciesPath is set.
	PolicyDigest string
}

// Syncer syncs one repository path into the cluster.
type Syncer struct {
	opts    Options
	mirror  *mirror
	engine  engine.GitOpsEngine
	dynamic dynamic.Interface
	// typed writes the policies ConfigMap (Options.PoliciesPath).
	typed  kubernetes.Interface
	source string
}

// New validates the options and prepares the engine; call Start before Sync.
func New(cfg *rest.Config, o Options) (*Syncer, error) {
	if o.Repo == "" {
		return nil, errNoRepo
	}
	if o.Revision == "" {
		o.Revision = "HEAD"
	}
	if len(o.Namespaces) == 0 {
		return nil, fmt.Errorf("no request namespace allowed: give at least one")
	}
	for _, ns := range o.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("invalid namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(os.TempDir(), "remediator-sync")
	}
	repo := o.Repo
	// A local path is cloned by absolute path so that the mirror does not depend on
	// the working directory the process was started from.
	if !strings.Contains(repo, "://") && !strings.Contains(repo, "@") {
		if abs, err := filepath.Abs(repo); err == nil {
			repo = abs
		}
	}
	o.Repo = repo
	if err := checkTransport(repo, o.AllowInsecureTransport); err != nil {
		return nil, err
	}
	creds, err := newCredentials(o)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(repo + "\x00" + filepath.ToSlash(filepath.Clean(o.Path))))
	s := &Syncer{opts: o, mirror: newMirror(repo, o.WorkDir, creds), source: hex.EncodeToString(sum[:10])}

	// The cluster cache would otherwise watch every resource type it may list; it
	// only needs RemediationRequests, and only in the allowed namespaces.
	clusterCache := cache.NewClusterCache(cfg,
		cache.SetNamespaces(o.Namespaces),
		cache.SetClusterResources(false),
		cache.SetRespectRBAC(cache.RespectRbacNormal),
		cache.SetSettings(cache.Settings{ResourcesFilter: onlyRequests{}, ResourceHealthOverride: cache.NewNoopSettings()}),
		// gitops-engine logs every sync and cache resync at info level; it is detail
		// here (-v=2), the sync's own lines say what was applied or pruned.
		cache.SetLogr(o.Log.V(2)),
		cache.SetPopulateResourceInfoHandler(func(un *unstructured.Unstructured, _ bool) (any, bool) {
			// The engine prunes only managed objects whose manifest is cached.
			src := un.GetAnnotations()[AnnotationSyncSource]
			return src, src != ""
		}),
	)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	s.dynamic = dc
	if o.PoliciesPath != "" {
		if o.PoliciesConfigMap.Name == "" || o.PoliciesConfigMap.Namespace == "" {
			return nil, fmt.Errorf("syncing policies from %q needs the ConfigMap (namespace/name) to write them into", o.PoliciesPath)
		}
		if s.typed, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("creating a client: %w", err)
		}
	}
	s.engine = engine.NewEngine(cfg, clusterCache, engine.WithLogr(o.Log.V(2)))
	return s, nil
}

// Start fills the cluster cache; the returned func releases it.
func (s *Syncer) Start() (func(), error) {
	stop, err := s.engine.Run()
	if err != nil {
		return nil, fmt.Errorf("starting the gitops engine: %w", err)
	}
	return stop, nil
}

// Sync fetches the revision and makes the cluster's managed requests match it. On
// any error before the apply (fetch, parse, refused object) nothing in the cluster
// is changed; the caller retries at its next interval.
func (s *Syncer) Sync(ctx context.Context) (*Result, error) {
	log := s.opts.Log
	if err := s.mirror.fetch(ctx); err != nil {
		return nil, err
	}
	commit, err := s.mirror.resolve(ctx, s.opts.Revision)
	if err != nil {
		return nil, err
	}
	res := &Result{Commit: commit}
	files, err := s.mirror.files(ctx, commit, s.opts.Path)
	if err != nil {
		return res, err
	}
	targets, err := s.admit(files, commit)
	if err != nil {
		return res, fmt.Errorf("commit %s refused, nothing applied: %w", ShortRevision(commit), err)
	}
	var pols *syncedPolicies
	if s.opts.PoliciesPath != "" {
		if pols, err = s.readPolicies(ctx, commit); err != nil {
			return res, fmt.Errorf("commit %s refused, nothing applied: %w", ShortRevision(commit), err)
		}
	}
	if err := s.dryRun(ctx, targets); err != nil {
		return res, fmt.Errorf("commit %s refused by the API server, nothing applied: %w", ShortRevision(commit), err)
	}
	// The policies first: a request of the same commit may count on them (the
	// controller re-reads --policies-dir every --policy-reload-interval).
	if pols != nil {
		if err := applyPolicies(ctx, s.typed, s.opts.PoliciesConfigMap, pols, commit); err != nil {
			return res, fmt.Errorf("syncing commit %s: %w", ShortRevision(commit), err)
		}
		res.PolicyDigest = pols.digest
		log.Info("Applied policies", "configMap", s.opts.PoliciesConfigMap.String(), "commit", commit, "policyDigest", pols.digest)
	}
	log.Info("Syncing", "commit", commit, "path", s.opts.Path, "requests", len(targets))

	if err := s.apply(ctx, targets, commit, res); err != nil {
		return res, fmt.Errorf("syncing commit %s: %w", ShortRevision(commit), err)
	}
	return res, nil
}

// dryRun asks the API server to validate every request as it would be applied
// (schema, CEL rules such as the immutable target) before anything is changed.
// gitops-engine's own dry run is client-side only, which would let one refused
// request fail mid-sync after others were applied or pruned.
func (s *Syncer) dryRun(ctx context.Context, targets []*unstructured.Unstructured) error {
	var problems []string
	for _, o := range targets {
		data, err := json.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("encoding %s/%s: %w", o.GetNamespace(), o.GetName(), err)
		}
		_, err = s.dynamic.Resource(requestsGVR).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "remediator-sync-dry-run", Force: ptr.To(true)})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s/%s): %v", o.GetAnnotations()[AnnotationGitPath], o.GetNamespace(), o.GetName(), err))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

var requestsGVR = v1alpha1.GroupVersion.WithResource("remediationrequests")

var background = metav1.DeletePropagationBackground

func klogRef(k kube.ResourceKey) string { return k.Namespace + "/" + k.Name }

// admit parses every file and refuses the whole revision if any object is not a
// RemediationRequest in an allowed namespace, or sets what Refusals refuses. All problems are reported at once,
// sorted, so that the log names every offending file in one line.
func (s *Syncer) admit(files []manifestFile, commit string) ([]*unstructured.Unstructured, error) {
	var (
		out      []*unstructured.Unstructured
		problems []string
		seen     = map[string]string{}
	)
	for _, f := range files {
		// Read as remediator plan reads the pull request (Documents, DecodeObject), so
		// that nothing plan refuses is applied: a duplicate key is an error, not its
		// last value.
		docs, err := Documents(f.Data)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: malformed manifest: %v", f.Path, err))
			continue
		}
		for i, doc := range docs {
			o, why := s.admitDocument(f, fmt.Sprintf("%s (document %d)", f.Path, i+1), doc, seen)
			problems = append(problems, why...)
			if o != nil {
				out = append(out, o)
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%d problem(s): %s", len(problems), strings.Join(problems, "; "))
	}
	return out, nil
}

// admitDocument reads one document of file f, at where, into the request to apply,
// annotated with its origin. It returns the problems that refuse the revision; an
// object comes back even with problems when only Refusals refuses it, and none for a
// document without an object. seen maps the requests read so far to where they were.
func (s *Syncer) admitDocument(f manifestFile, where string, doc Document, seen map[string]string) (*unstructured.Unstructured, []string) {
	if doc.Err != nil {
		return nil, []string{fmt.Sprintf("%s: malformed YAML: %v", where, doc.Err)}
	}
	if doc.JSON == nil {
		return nil, nil
	}
	obj, strict, err := DecodeObject(doc.JSON)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: not a Kubernetes object: %v", where, err)}
	}
	if len(strict) > 0 {
		var problems []string
		for _, e := range strict {
			problems = append(problems, fmt.Sprintf("%s: %v", where, e))
		}
		return nil, problems
	}
	o := &unstructured.Unstructured{Object: obj}
	if problem := s.checkRequest(o, where, seen); problem != "" {
		return nil, []string{problem}
	}
	// Fields and annotations that would let the manifest decide how or when
	// the request is applied or deleted (hooks, recreating sync options,
	// finalizers, owners); see Refusals.
	var problems []string
	for _, r := range Refusals(o.Object) {
		problems = append(problems, where+": "+r)
	}
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationGitCommit] = f.Commit
	ann[AnnotationGitPath] = f.Path
	ann[AnnotationSyncSource] = s.source
	o.SetAnnotations(ann)
	// Status belongs to the controller; a status block in Git is ignored by
	// the API server anyway, but would show as a permanent diff.
	unstructured.RemoveNestedField(o.Object, "status")
	return o, problems
}

// checkRequest says why o, read at where, is not a request the sync may apply: not a
// served RemediationRequest, unnamed, outside the allowed namespaces, or defined
// twice; "" when it is one. It puts a request without a namespace in the first
// allowed one, and records it in seen.
func (s *Syncer) checkRequest(o *unstructured.Unstructured, where string, seen map[string]string) string {
	gvk := o.GroupVersionKind()
	if gvk.Group != v1alpha1.GroupVersion.Group || gvk.Kind != "RemediationRequest" {
		kind := gvk.Kind
		if kind == "" {
			kind = "an object without kind"
		}
		return fmt.Sprintf("%s: %s %q is not a RemediationRequest; only remediator.io RemediationRequests may be synced", where, kind, o.GetName())
	}
	if gvk.Version != v1alpha1.GroupVersion.Version {
		return fmt.Sprintf("%s: apiVersion %s is not served; use %s", where, o.GetAPIVersion(), v1alpha1.GroupVersion)
	}
	if o.GetName() == "" {
		return where + ": metadata.name is empty"
	}
	if o.GetNamespace() == "" {
		o.SetNamespace(s.opts.Namespaces[0])
	}
	if !slices.Contains(s.opts.Namespaces, o.GetNamespace()) {
		return fmt.Sprintf("%s: RemediationRequest %s/%s is in namespace %q; allowed: %s", where, o.GetNamespace(), o.GetName(), o.GetNamespace(), strings.Join(s.opts.Namespaces, ", "))
	}
	key := o.GetNamespace() + "/" + o.GetName()
	if prev, dup := seen[key]; dup {
		return fmt.Sprintf("%s: RemediationRequest %s is also defined in %s", where, key, prev)
	}
	seen[key] = where
	return ""
}

// onlyRequests keeps the cluster cache to RemediationRequests.
type onlyRequests struct{}

func (onlyRequests) IsExcludedResource(group, kind, _ string) bool {
	return group != v1alpha1.GroupVersion.Group || kind != "RemediationRequest"
}
