// Package diffsvg draws which rows of which arrays changed between two
// snapshots, and by how much, as a deterministic SVG picture (and a
// self-contained HTML page holding the picture and a table): the view a
// reviewer takes in at a glance before reading numbers.
//
// # Picture
//
// One block per array, in natural name order (digit runs compare as
// numbers, so layers.2 comes before layers.10): a text line with the name,
// dtype, shape and what happened (changed k of n rows; added, removed,
// reshaped, retyped; unchanged), and below it a heatmap strip Width pixels
// wide. A strip has one bin per row, or, for arrays with more rows than
// Width, Width bins of about rows/Width consecutive rows each (bin i holds
// the rows r with floor(r·bins/rows) = i). A bin's colour is:
//
//	neutral grey #dcdcdc   no row of the bin changed
//	one of 16 levels       yellow → dark red: the bin's metric on a log
//	                       scale between the smallest and largest metric
//	                       of that array's changed bins (its text line
//	                       ends "scale LO…HI"; Strip.ScaleRange)
//	magenta #e7298a        an element became NaN or ±Inf, or a change
//	                       between a finite and a non-finite value
//	blue #4a90d9           the array is new, or changed shape or dtype
//	dark grey #777777      the array was removed
//
// The metric is max |Δ| over the bin's changed elements (ScaleAbs) or that
// divided by max |old| over the same elements (ScaleRel; +Inf, the top
// level, when those were all zero). Integer and bool dtypes use their
// values' differences. Every array has its own scale, so a step counter
// moving by 251 does not wash out a 1e-4 change of a weight matrix: the
// colours compare bins within an array, the numbers on the text lines
// compare arrays (the legend says so). Adjacent bins of the same colour are drawn as one
// rectangle with a <title> naming their rows, so the SVG stays small when
// few rows change. A strip with more changed bins than a sampled strip
// has bins (Width/4: a dense change, as under Adam) is drawn in cells 4
// pixels wide instead, each holding the changed bins that start in it,
// coloured by its largest change and naming its rows: such a strip has at
// most Width/4 rectangles, however many of its rows changed.
//
// # Limits and hostile input
//
// Compute reads only the rows Options.Candidates names (the changed rows a
// snapshot.Diff found, or the rows of changed WTXT chunks), in pieces of
// at most 1 MiB; with Options.SampleBytes an array whose candidate rows
// hold more than that (a dense change) is judged from one small piece per
// bin instead, with bins 4 pixels wide, and its text line says so
// (Strip.Sampled); neighbouring bins take their pieces from adjacent
// rows, and a Source that is a PieceReader gets them in batches (a WTXT
// source reads two neighbours' pieces with one pread when the rows are
// narrow); with Options.Workers several arrays are compared at once, the
// picture unchanged; bins are counted, never allocated per row, and
// bin/row arithmetic is done in 128 bits (rows up to 2^63-1 work). At most
// MaxStrips arrays are drawn (unchanged ones are dropped first, then a
// note says how many more changed); names are XML-escaped, invalid UTF-8
// and control characters are replaced by U+FFFD, and names longer than
// MaxNameRunes are shortened with "…". No array data is ever written into
// the picture: only names, dtypes, shapes, row numbers and statistics.
//
// # Determinism
//
// The same two snapshots and Options give the same bytes: no maps are
// iterated, no time or randomness is used, and numbers are printed with
// strconv in fixed formats.
package diffsvg
