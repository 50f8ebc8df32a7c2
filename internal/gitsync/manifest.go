package gitsync

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	yaml3 "go.yaml.in/yaml/v3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The one reader of manifest files from Git: remediator sync applies what it reads,
// and remediator plan checks the pull request with it, so that a manifest plan
// refuses never reaches the cluster through the sync.

// Document is one YAML document of a manifest file, converted to JSON. JSON is nil
// for a document that holds only comments (or null); Err says why a document could
// not be read.
type Document struct {
	JSON []byte
	Err  error
}

// Documents splits a manifest file into its YAML documents (a JSON file is one YAML
// document), keeping the empty ones so that document numbers match the file. Each
// is read strictly: a duplicate key, which a lenient reader silently resolves to its
// last value while a reviewer reads the first, makes the document an error, and so
// does anything after its first value (a stream of JSON objects, which the YAML
// reader would otherwise cut to the first). The error is for a file that cannot be
// split into documents at all.
func Documents(data []byte) ([]Document, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []Document
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err == nil {
			err = oneValue(doc)
		}
		if t := bytes.TrimSpace(j); err == nil && (len(t) == 0 || string(t) == "null") {
			j = nil
		}
		docs = append(docs, Document{JSON: j, Err: err})
	}
}

// DecodeObject decodes a document's JSON as the API server's strict decoder reads an
// object: integers stay int64 (a CRD's schema tells integer from number), and each
// duplicate field is one of strict. err is for JSON that is not an object.
func DecodeObject(data []byte) (obj map[string]any, strict []error, err error) {
	strict, err = kjson.UnmarshalStrict(data, &obj)
	if err == nil && obj == nil {
		err = fmt.Errorf("not an object")
	}
	return obj, strict, err
}

// oneValue refuses a YAML document that holds more than one value: go-yaml v2, which
// YAMLToJSONStrict reads with, ignores what follows a top-level flow collection
// ({...} {...}, a JSON stream), where v3 reports it.
func oneValue(doc []byte) error {
	dec := yaml3.NewDecoder(bytes.NewReader(doc))
	var first yaml3.Node
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var next yaml3.Node
	if err := dec.Decode(&next); errors.Is(err, io.EOF) {
		return nil
	}
	return errors.New("more than one value in one document (a stream of JSON objects?): put each object in a YAML document of its own, separated by ---")
}
