// Package gitsync owns the Git -> cluster reconcile loop: the embedded GitOps agent
// behind `remediator sync`, for clusters without Argo CD. Each Sync fetches the
// remediation repository with go-git, in-process (no git binary, so it runs in the
// distroless image; HTTPS token or SSH key credentials come from files), admits only
// RemediationRequests in the allowed namespaces, and applies and prunes them through
// gitops-engine's engine and sync packages, the machinery Argo CD itself uses; the
// command repeats it every --interval. Git must not become a back door for arbitrary
// objects, so a revision with anything else in it is refused whole and nothing of it
// reaches the cluster.
package gitsync
