/** The client's version: the version of the API description it was generated from. */
export const VERSION = "0.1.0";
