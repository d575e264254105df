// The executed copies' math, drawn from disk with no network: KaTeX (katex/, MIT licence in
// katex/LICENSE, from the npm package "katex") and its auto-render, loaded just before this file.
// It replaces nbconvert's MathJax, which comes from a CDN. Only markdown is typeset, as in
// Jupyter: code and its printed output keep their dollar signs.
(function () {
  function typeset() {
    if (!window.renderMathInElement) { return; }  // KaTeX missing: the TeX stays readable as text
    var places = document.querySelectorAll(".jp-RenderedMarkdown, .jp-RenderedLatex");
    for (var i = 0; i < places.length; i++) {
      window.renderMathInElement(places[i], {
        delimiters: [
          {left: "$$", right: "$$", display: true},
          {left: "\\[", right: "\\]", display: true},
          {left: "$", right: "$", display: false},
          {left: "\\(", right: "\\)", display: false}
        ],
        throwOnError: false
      });
    }
    document.body.setAttribute("data-math", "katex");
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", typeset);
  } else {
    typeset();
  }
})();
