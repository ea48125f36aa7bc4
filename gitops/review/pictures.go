package review

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/google/go-github/v60/github"
)

// PictureSuffix ends the daemon's diff pictures (gitops.FilePicture,
// "current.diff.svg").
const PictureSuffix = ".diff.svg"

// maxPictures bounds the pictures one review links.
const maxPictures = 10

// PictureRef is a diff picture (snapshot/diffsvg) at the pull request's
// head. GitHub strips SVG markup from review bodies, so the review shows
// it as an image linked from the repository: ImageURL (the raw file) and
// PageURL (GitHub's page for the file, which also renders it).
type PictureRef struct {
	Path, ImageURL, PageURL string
}

// IsPicture reports whether a repository path is a diff picture.
func IsPicture(p string) bool { return strings.HasSuffix(p, PictureSuffix) }

// pictureRefs lists the diff pictures the pull request adds or changes,
// at its head commit, in file order (at most maxPictures).
func (c *Client) pictureRefs(owner, repo, headSHA string, files []*github.CommitFile) []PictureRef {
	web := c.webBase()
	var out []PictureRef
	for _, f := range files {
		name := f.GetFilename()
		if !IsPicture(name) || f.GetStatus() == "removed" || len(out) == maxPictures {
			continue
		}
		segs := strings.Split(name, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		page := fmt.Sprintf("%s/%s/%s/blob/%s/%s", web, url.PathEscape(owner), url.PathEscape(repo), url.PathEscape(headSHA), strings.Join(segs, "/"))
		out = append(out, PictureRef{Path: name, PageURL: page, ImageURL: page + "?raw=true"})
	}
	return out
}

// webBase is the web server of the API: https://github.com for
// api.github.com, else the API's scheme and host (GitHub Enterprise
// Server serves both from one host).
func (c *Client) webBase() string {
	u := c.gh.BaseURL
	if u == nil {
		return "https://github.com"
	}
	if u.Host == "api.github.com" {
		return "https://github.com"
	}
	return u.Scheme + "://" + u.Host
}

// renderPictures writes the pictures section of a review body.
func renderPictures(b *strings.Builder, pics []PictureRef) {
	if len(pics) == 0 {
		return
	}
	b.WriteString("\n### Which rows moved\n\n")
	for _, p := range pics {
		fmt.Fprintf(b, "![rows changed per array in %s](%s)\n\n", mdSafe(p.Path), p.ImageURL)
		fmt.Fprintf(b, "[`%s`](%s): the daemon's picture of its latest generation against the one before (one strip per array, layers in order; grey: unchanged rows, yellow → dark red: larger max |Δ|, magenta: NaN/Inf). If the image does not load (private repositories), the link opens it.\n", mdSafe(p.Path), p.PageURL)
	}
}
