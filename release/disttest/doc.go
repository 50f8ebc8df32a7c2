// Package disttest checks what `make release` wrote into its DIST directory: each
// platform's archive and the version its binary carries, the image index's platforms and
// their binaries, the image tarball as containerd imports it, the chart's versions, the krew manifest's checksums, the completions,
// the SBOM and checksums.txt. `make release` (and `make release-smoke`) run it with
// RELEASE_DIST, RELEASE_VERSION, RELEASE_PLATFORMS and RELEASE_IMAGE set; without
// RELEASE_DIST it skips.
package disttest
