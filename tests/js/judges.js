// The browser clients of the resumable-upload judges, bundled by esbuild
// into one script the tests add to a page (tests/test_browser_tus_clients.py).
import * as tus from "tus-js-client";
import Uppy from "@uppy/core";
import Tus from "@uppy/tus";

window.judge = { tus, Uppy, Tus };
