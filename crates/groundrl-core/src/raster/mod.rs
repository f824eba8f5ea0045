//! Drawing on RGB images: rectangles and simple shapes ([`draw`]) and text in an embedded font
//! ([`font`]). The synthetic screenshots are drawn with it, and so are the previews of what a sample
//! asks or a model answered (`data::annotate`); neither owns it, so both depend on it from here.

pub mod draw;
pub mod font;

/// An sRGB colour.
pub type Rgb = [u8; 3];
