package gitsync_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/gitsync"
)

// TestDocumentsReadStrictly: the one reader of manifests from Git (sync applies what
// it reads, plan checks the pull request with it) numbers documents as the file does
// and refuses what a lenient reader would silently resolve or drop.
func TestDocumentsReadStrictly(t *testing.T) {
	type doc struct {
		json string // "" for a document with nothing in it
		err  string // a substring of the document's error
	}
	cases := []struct {
		name string
		data string
		want []doc
	}{
		{name: "two documents and an empty one", data: "a: 1\n---\n# only a comment\n---\nb: [1, 2]\n",
			want: []doc{{json: `{"a":1}`}, {}, {json: `{"b":[1,2]}`}}},
		{name: "null document", data: "null\n", want: []doc{{}}},
		{name: "JSON", data: `{"a": {"b": 1}}`, want: []doc{{json: `{"a":{"b":1}}`}}},
		{name: "duplicate key", data: "a: 1\na: 2\n", want: []doc{{err: `"a" already set in map`}}},
		{name: "nested duplicate key", data: "spec:\n  target:\n    pv: x\n    pv: y\n", want: []doc{{err: `"pv" already set in map`}}},
		{name: "duplicate key in JSON", data: `{"kind": "A", "kind": "B"}`, want: []doc{{err: `"kind" already set in map`}}},
		{name: "a stream of JSON objects", data: "{\"kind\": \"A\"}\n{\"kind\": \"Secret\"}\n", want: []doc{{err: "more than one value in one document"}}},
		{name: "two flow mappings on a line", data: "{a: 1} {b: 2}\n", want: []doc{{err: "more than one value in one document"}}},
		{name: "malformed", data: "kind: [oops\n", want: []doc{{err: "did not find expected"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := gitsync.Documents([]byte(tc.data))
			require.NoError(t, err)
			require.Len(t, docs, len(tc.want))
			for i, w := range tc.want {
				if w.err != "" {
					assert.ErrorContains(t, docs[i].Err, w.err, "document %d", i+1)
					continue
				}
				require.NoError(t, docs[i].Err, "document %d", i+1)
				if w.json == "" {
					assert.Nil(t, docs[i].JSON, "document %d", i+1)
				} else {
					assert.JSONEq(t, w.json, string(docs[i].JSON), "document %d", i+1)
				}
			}
		})
	}
}

// TestDecodeObjectKeepsIntegers: a document decodes as the API server's strict decoder
// reads it, integers as int64, and anything but an object is an error.
func TestDecodeObjectKeepsIntegers(t *testing.T) {
	obj, strict, err := gitsync.DecodeObject([]byte(`{"a": 3, "b": 1.5}`))
	require.NoError(t, err)
	assert.Empty(t, strict)
	assert.Equal(t, map[string]any{"a": int64(3), "b": 1.5}, obj)
	for _, bad := range []string{`[1]`, `"s"`, `null`} {
		_, _, err := gitsync.DecodeObject([]byte(bad))
		assert.Error(t, err, bad)
	}
}
