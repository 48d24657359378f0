package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// formOf is the form cost.FormOf names for a body, which must have one.
func formOf(t testing.TB, body *ir.Graph) cost.Form {
	f, err := cost.FormOf(body)
	require.NoError(t, err, "%s", body)
	return f
}
