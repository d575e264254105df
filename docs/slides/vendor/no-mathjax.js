// The slides use no LaTeX: nbconvert's reveal template calls MathJax on every slide change, and
// loading MathJax from its CDN would fail offline. This stands in for the two calls it makes.
window.MathJax = {Hub: {getAllJax: function () { return []; }, Rerender: function () {}}};
