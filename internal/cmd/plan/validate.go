package plan

// Admission without an API server: plan checks a RemediationRequest against the CRD
// the chart installs (charts/remediator, embedded), through the API server's own
// packages from k8s.io/apiextensions-apiserver, in the order the server applies them
// when a request is created with strict field validation (kubectl create, apply and
// remediator sync). No rule of the CRD is copied here: a new schema constraint or CEL
// rule reaches plan with the CRD itself.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	chart "github.com/remediator/remediator/charts/remediator"
)

// requestValidator checks RemediationRequests as the API server serving one CRD
// would: the structural schema for pruning and defaulting, the OpenAPI schema, and
// the CEL rules, all taken from that CRD's v1alpha1 version.
type requestValidator struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	// statusSubresource is set when the version has a status subresource: a create
	// drops the status it is sent.
	statusSubresource bool
	structural        *structuralschema.Structural
	openAPI           apiservervalidation.SchemaValidator
	// rules is nil when the CRD has no x-kubernetes-validations.
	rules *cel.Validator
}

// embeddedRequestValidator is built once, on first use, from the CRD the chart
// installs; the controller and scan commands never pay for compiling its rules.
var embeddedRequestValidator = sync.OnceValues(func() (*requestValidator, error) {
	v, err := newRequestValidator(chart.RemediationRequestCRD)
	if err != nil {
		return nil, fmt.Errorf("the chart's RemediationRequest CRD (charts/remediator/files/crds): %w", err)
	}
	return v, nil
})

// newRequestValidator builds a validator from a CRD manifest. The CRD must serve
// v1alpha1 RemediationRequests, since what the validator accepts is decoded into
// api/v1alpha1's types.
func newRequestValidator(crdYAML []byte) (*requestValidator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("decoding the CustomResourceDefinition: %w", err)
	}
	if gvk := crd.GroupVersionKind(); gvk != apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition") {
		return nil, fmt.Errorf("want an %s CustomResourceDefinition, got %s %s", apiextensionsv1.SchemeGroupVersion, gvk.GroupVersion(), gvk.Kind)
	}
	want := v1alpha1.GroupVersion.WithKind("RemediationRequest")
	if crd.Spec.Group != want.Group || crd.Spec.Names.Kind != want.Kind {
		return nil, fmt.Errorf("CRD %s defines %s in group %q, want %s in %q", crd.Name, crd.Spec.Names.Kind, crd.Spec.Group, want.Kind, want.Group)
	}

	// Default and convert it as the API server does with the CRDs it serves. Whether
	// the API server would install it at all (CEL rules that compile, within their
	// cost) is the API server's to say: the envtest suites install this very CRD. A
	// rule that did not compile would refuse every request, naming the compiler error.
	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)
	scheme.Default(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(crd, internal, nil); err != nil {
		return nil, fmt.Errorf("converting CRD %s to the internal version: %w", crd.Name, err)
	}
	if !slices.ContainsFunc(internal.Spec.Versions, func(ver apiextensions.CustomResourceDefinitionVersion) bool {
		return ver.Name == want.Version && ver.Served
	}) {
		return nil, fmt.Errorf("CRD %s does not serve version %s", crd.Name, want.Version)
	}
	validation, err := apiextensions.GetSchemaForVersion(internal, want.Version)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, want.Version, err)
	}
	if validation == nil || validation.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("CRD %s version %s has no OpenAPI schema", crd.Name, want.Version)
	}
	subresources, err := apiextensions.GetSubresourcesForVersion(internal, want.Version)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, want.Version, err)
	}

	// As the API server's CRD handler prepares a version for serving.
	s, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: the schema is not structural: %w", crd.Name, want.Version, err)
	}
	s = s.DeepCopy()
	if err := defaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("CRD %s version %s: pruning the defaults: %w", crd.Name, want.Version, err)
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: building the schema validator: %w", crd.Name, want.Version, err)
	}
	return &requestValidator{
		gvk:               want,
		namespaced:        internal.Spec.Scope == apiextensions.NamespaceScoped,
		statusSubresource: subresources != nil && subresources.Status != nil,
		structural:        s,
		openAPI:           sv,
		rules:             cel.NewValidator(s, true, celconfig.PerCallLimit),
	}, nil
}

// admission is what the API server makes of a request it is asked to create.
type admission struct {
	// unknownFields are the paths of fields the schema does not know, sorted; strict
	// field validation refuses a request for them.
	unknownFields []string
	// errs are the validation errors, sorted, with the API server's note that some
	// CEL rules were not checked, if any, last.
	errs field.ErrorList
	// meta is the request's metadata as the server decoded it, nil when admit
	// failed to decode it.
	meta *metav1.ObjectMeta
}

// admit runs, on obj (decoded from JSON with integers kept as int64, as the API
// server's decoder does), what the API server does on create: metadata coercion,
// pruning of unknown fields, structural defaulting, dropping the status a create
// cannot set, metadata validation, OpenAPI schema validation and the CEL rules.
// obj is left as the server would store it. A malformed metadata or embedded object
// is an error, as the server refuses to decode it.
func (v *requestValidator) admit(ctx context.Context, obj map[string]any) (admission, error) {
	var a admission
	if err := v.coerce(obj, &a); err != nil {
		return a, err
	}
	defaulting.Default(obj, v.structural)
	// PrepareForCreate.
	if v.statusSubresource {
		delete(obj, "status")
	}
	if a.meta == nil {
		a.meta = &metav1.ObjectMeta{}
	}
	a.meta.Generation = 1
	if err := objectmeta.SetObjectMeta(obj, a.meta); err != nil {
		return a, fmt.Errorf("metadata: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}

	// customResourceStrategy.Validate. A namespace left out is not an error: kubectl
	// and remediator sync send the request to a namespace, which the server fills in.
	var errs field.ErrorList
	requiresNamespace := v.namespaced && u.GetNamespace() != ""
	errs = append(errs, apivalidation.ValidateObjectMetaAccessor(u, requiresNamespace, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.openAPI)...)
	errs = append(errs, objectmeta.Validate(nil, obj, v.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	sortFieldErrors(errs)
	if v.rules != nil {
		if slices.ContainsFunc(errs, blocksRules) {
			errs = append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		} else {
			ruleErrs, _ := v.rules.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
			sortFieldErrors(ruleErrs)
			errs = append(errs, ruleErrs...)
		}
	}
	a.errs = errs
	return a, nil
}

// coerce is the API server decoder's schema step (unstructuredSchemaCoercer): it
// decodes metadata into ObjectMeta, prunes what the schema does not know, drops
// nulls the schema does not allow, and records the unknown fields' paths.
func (v *requestValidator) coerce(obj map[string]any, a *admission) error {
	apiVersion, kind := obj["apiVersion"], obj["kind"]
	meta, found, unknown, err := objectmeta.GetObjectMetaWithOptions(obj, objectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	unknown = append(unknown, pruning.PruneWithOptions(obj, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	defaulting.PruneNonNullableNullsWithoutDefaults(obj, v.structural)
	ferr, paths := objectmeta.CoerceWithOptions(nil, obj, v.structural, false, objectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return ferr
	}
	unknown = append(unknown, paths...)
	// The server restores what pruning took off the root; admit writes the metadata
	// back once PrepareForCreate has set its generation.
	obj["apiVersion"], obj["kind"] = apiVersion, kind
	if found {
		a.meta = meta
	}
	slices.Sort(unknown)
	a.unknownFields = slices.Compact(unknown)
	return nil
}

// blocksRules reports the errors after which the API server does not run CEL rules
// (customResourceStrategy's hasBlockingErr): a rule would see a missing required
// field, a value of the wrong type, or one beyond the bounds its cost was estimated for.
func blocksRules(e *field.Error) bool {
	switch e.Type {
	case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
		return true
	}
	return false
}

// sortFieldErrors orders errors by field and then message, so that plan prints them
// the same way every time whatever order the validators walked the object in.
func sortFieldErrors(errs field.ErrorList) {
	slices.SortStableFunc(errs, func(a, b *field.Error) int {
		return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Error(), b.Error()))
	})
}
